// Issue 29, "Trust first": exports never touch what is not theirs (symlinks, folders we did not
// make, the spool, the store), generated nginx config is quoted, an export is checked against the
// plan, export paths are unambiguous, and a region's exports follow its pack. Each test is one of
// the findings, reproduced from the outside through the real binary and read back the way a user
// would: bytes and checksums of the files around, exit codes, messages, status entries.
import Foundation
import Glibc
import TileSpoolCore
import TileSpoolIO
import XCTest

final class TrustExportTests: XCTestCase {
    var nginx: NginxServer!
    var fx: SpoolFixture!
    var others: [NginxServer] = []

    override func setUpWithError() throws {
        nginx = try NginxServer(root: try MapData.require())
        fx = try SpoolFixture()
        try fx.start()
    }

    override func tearDown() {
        fx?.stop()
        nginx?.stop()
        for s in others { s.stop() }
        others = []
    }

    var tonerTemplate: String { nginx.baseURL + "/raster/stamen_toner/{z}/{x}/{y}.png" }

    func completeToner(id: String = "toner", extra: [String: Any] = [:]) throws {
        var r: [String: Any] = ["id": id, "tiles": [tonerTemplate], "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 2]
        for (k, v) in extra { r[k] = v }
        try fx.drop(id + ".json", r)
        try fx.waitForState(id, "completed")
    }

    /// A folder outside the spool and store with a file, a subfolder and a symlink into it; its
    /// checksums before and after must be equal.
    func sentinel() throws -> (dir: String, file: String, sums: () -> [String: String]) {
        let dir = fx.root.appendingPathComponent("sentinel").path
        try FileManager.default.createDirectory(atPath: dir + "/sub", withIntermediateDirectories: true)
        try Data("precious\n".utf8).write(to: URL(fileURLWithPath: dir + "/precious.txt"))
        try Data("deeper\n".utf8).write(to: URL(fileURLWithPath: dir + "/sub/deeper.txt"))
        XCTAssertEqual(symlink(dir + "/precious.txt", dir + "/sub/link"), 0)
        let sums = { () -> [String: String] in
            var out: [String: String] = [:]
            let e = FileManager.default.enumerator(atPath: dir)
            while let rel = e?.nextObject() as? String {
                var st = stat()
                lstat(dir + "/" + rel, &st)
                switch st.st_mode & S_IFMT {
                case S_IFREG: out[rel] = sha256Hex((try? Data(contentsOf: URL(fileURLWithPath: dir + "/" + rel))) ?? Data())
                case S_IFLNK: out[rel] = "-> " + ((try? FileManager.default.destinationOfSymbolicLink(atPath: dir + "/" + rel)) ?? "?")
                default: out[rel] = "dir"
                }
            }
            return out
        }
        return (dir, dir + "/precious.txt", sums)
    }

    func exportCLI(_ args: [String]) throws -> (Int32, String) {
        try fx.cli(["export"] + args + ["--spool", fx.spool, "--store", fx.store])
    }

    // MARK: - Finding 3: symlinks

    /// `--output` that is a symlink (to a file, to a folder), with `--force`, is refused and the
    /// link's target is untouched; so is a symlink planted in `<spool>/exports/` for the daemon.
    func testExportsNeverWriteThroughASymlink() throws {
        try completeToner(extra: ["exports": [["format": "mbtiles"]]])
        let s = try sentinel()
        let before = s.sums()
        let fileLink = fx.root.appendingPathComponent("out.mbtiles").path
        XCTAssertEqual(symlink(s.file, fileLink), 0)
        var (rc, out) = try exportCLI(["toner", "--format", "mbtiles", "--output", fileLink, "--force"])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("symbolic link"), out)
        let dirLink = fx.root.appendingPathComponent("out-site").path
        XCTAssertEqual(symlink(s.dir, dirLink), 0)
        (rc, out) = try exportCLI(["toner", "--format", "site", "--output", dirLink, "--force"])
        XCTAssertEqual(rc, 1, out)
        XCTAssertEqual(s.sums(), before)
        XCTAssertEqual(try FileManager.default.destinationOfSymbolicLink(atPath: fileLink), s.file)

        // The daemon: exports/ entries it would replace are symlinks planted by someone else.
        let planted = fx.spool + "/exports/toner.mbtiles"
        XCTAssertEqual(unlink(planted), 0) // the export written at completion
        XCTAssertEqual(symlink(s.file, planted), 0)
        try fx.drop("toner.json", ["id": "toner", "tiles": [tonerTemplate], "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 2,
                                    "exports": [["format": "mbtiles"]]])
        try waitUntil("the export after the re-drop fails") {
            ((fx.status("toner")?["exports"] as? [[String: Any]])?.first?["state"] as? String) == "failed"
        }
        let entry = try XCTUnwrap((fx.status("toner")?["exports"] as? [[String: Any]])?.first)
        XCTAssertTrue(((entry["error"] as? [String: Any])?["message"] as? String ?? "").contains("symbolic link"), "\(entry)")
        XCTAssertEqual(s.sums(), before)
    }

    /// A site export replaces only a folder an earlier site export made (it carries
    /// `.tilespool-site`), by an atomic exchange that leaves no `.old-*` or work folder behind.
    func testSiteReplacesOnlyItsOwnFolderAndLeavesNothingBehind() throws {
        try completeToner()
        let site = fx.root.appendingPathComponent("site").path
        try FileManager.default.createDirectory(atPath: site, withIntermediateDirectories: true)
        try Data("mine\n".utf8).write(to: URL(fileURLWithPath: site + "/notes.txt"))
        var (rc, out) = try exportCLI(["toner", "--format", "site", "--output", site, "--force"])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("did not make"), out)
        XCTAssertEqual(try String(contentsOfFile: site + "/notes.txt", encoding: .utf8), "mine\n")

        try FileManager.default.removeItem(atPath: site)
        (rc, out) = try exportCLI(["toner", "--format", "site", "--output", site])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(FileManager.default.fileExists(atPath: site + "/.tilespool-site"))
        let inodeBefore = try XCTUnwrap(try FileManager.default.attributesOfItem(atPath: site)[.systemFileNumber] as? Int)
        (rc, out) = try exportCLI(["toner", "--format", "site", "--output", site, "--force"])
        XCTAssertEqual(rc, 0, out)
        let inodeAfter = try XCTUnwrap(try FileManager.default.attributesOfItem(atPath: site)[.systemFileNumber] as? Int)
        XCTAssertNotEqual(inodeBefore, inodeAfter, "the folder was replaced")
        XCTAssertEqual(fx.names(in: fx.root.path).filter { $0.hasPrefix(".") }, [], "no .old-* or work folder left beside the output")
    }

    // MARK: - Finding 5: the spool and the store

    /// An export that is, contains or lies inside the spool or the store is refused, whatever
    /// `--force` says; `<spool>/exports/` is the exception. The store stays whole (`verify`).
    func testExportsStayOutOfTheSpoolAndTheStore() throws {
        try completeToner()
        for output in [fx.store, fx.spool, fx.store + "/objects", fx.spool + "/status/x.mbtiles", fx.root.path, fx.store + "/regions/toner/x"] {
            let format = output.hasSuffix(".mbtiles") ? "mbtiles" : "site"
            let (rc, out) = try exportCLI(["toner", "--format", format, "--output", output, "--force"])
            XCTAssertEqual(rc, 1, "\(output): \(out)")
            XCTAssertTrue(out.contains("inside") || out.contains("contains") || out.contains("exists"), "\(output): \(out)")
        }
        fx.stop()
        let (vrc, vout) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(vrc, 0, vout)
        XCTAssertEqual(fx.state("toner"), "completed")
        let (rc, out) = try exportCLI(["toner", "--format", "mbtiles", "--output", fx.spool + "/exports/mine.mbtiles"])
        XCTAssertEqual(rc, 0, out)
    }

    // MARK: - Finding 2: nginx config injection

    /// A base URL whose path decodes to nginx syntax (`{ alias /etc/; }`) is written as one quoted
    /// string: nginx starts with the snippet (`nginx -t` passes), serves the site under the literal
    /// path, and serves nothing from /etc. A control character in it is refused up front.
    func testNginxSnippetQuotesTheBaseURLPath() throws {
        try completeToner()
        let site = fx.root.appendingPathComponent("site").path
        let hostile = "/a/ { alias /etc/; } location ^~ /b/"
        let encoded = hostile.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "/")))!
        let (rc, out) = try exportCLI(["toner", "--format", "site", "--output", site, "--base-url", "http://127.0.0.1:1" + encoded])
        XCTAssertEqual(rc, 0, out)
        let conf = try String(contentsOfFile: site + "/nginx.conf", encoding: .utf8)
        XCTAssertTrue(conf.contains("location ^~ \"/a/ { alias /etc/; } location ^~ /b/\" {"), conf)
        let web = try NginxServer(root: URL(fileURLWithPath: site), extraLocations: "include \(site)/nginx.conf;")
        others.append(web)
        let passwd = try fetch(web.baseURL + "/a/passwd")
        XCTAssertNotEqual(passwd.status, 200)
        XCTAssertFalse(String(decoding: passwd.body, as: UTF8.self).contains("root:"))
        let style = try fetch(web.baseURL + encoded + "style.json")
        XCTAssertEqual(style.status, 200)

        let (rc2, out2) = try exportCLI(["toner", "--format", "site", "--output", site + "2", "--base-url", "http://h/a%0A/"])
        XCTAssertEqual(rc2, 2, out2)
        try fx.drop("bad.json", ["tiles": [tonerTemplate], "bounds": [0, 0, 1, 1], "minZoom": 0, "maxZoom": 0,
                                 "exports": [["format": "site", "baseURL": "http://user:secret@h/x/"]]])
        try fx.waitForState("bad", "failed")
        XCTAssertEqual(fx.errorCode("bad"), "invalidRequest")
        XCTAssertFalse(String(decoding: try Data(contentsOf: URL(fileURLWithPath: fx.spool + "/status/bad.json")), as: UTF8.self).contains("secret"))
    }

    func fetch(_ url: String) throws -> (status: Int, body: Data) {
        let (rc, out) = try runTool("/usr/bin/curl", ["-s", "-g", "-o", "/dev/stdout", "-w", "\n%{http_code}", url])
        XCTAssertEqual(rc, 0, out)
        let lines = out.split(separator: "\n", omittingEmptySubsequences: false)
        return (Int(lines.last ?? "") ?? 0, Data(lines.dropLast().joined(separator: "\n").utf8))
    }

    // MARK: - Finding 7: checked against the plan

    /// A pack whose manifest is missing or cut short exports nothing and says why (exit 1).
    func testExportOfAnIncompletePackFails() throws {
        try completeToner()
        fx.stop()
        let manifest = fx.store + "/regions/toner/manifest.tsv"
        let full = try Data(contentsOf: URL(fileURLWithPath: manifest))
        try FileManager.default.moveItem(atPath: manifest, toPath: manifest + ".away")
        let output = fx.root.appendingPathComponent("t.pmtiles").path
        var (rc, out) = try exportCLI(["toner", "--format", "pmtiles", "--output", output])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("manifest"), out)
        XCTAssertFalse(FileManager.default.fileExists(atPath: output))
        // Half the manifest: the export names what is missing.
        try full.prefix(full.count / 2).write(to: URL(fileURLWithPath: manifest))
        (rc, out) = try exportCLI(["toner", "--format", "pmtiles", "--output", output])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("of the 21 tiles its plan names"), out)
        XCTAssertFalse(FileManager.default.fileExists(atPath: output))
        XCTAssertEqual(fx.names(in: fx.root.path).filter { $0.hasPrefix(".") }, [])
    }

    // MARK: - Finding 8: unambiguous paths

    /// Region `t` with source `tiles0` and region `t.tiles0` get two files; a site is `<id>.site`.
    func testExportNamesAreUnambiguous() {
        let a = ExportSpec(format: .pmtiles, source: "tiles0").outputName(id: "t")
        let b = ExportSpec(format: .pmtiles).outputName(id: "t.tiles0")
        XCTAssertEqual(a, "t+tiles0.pmtiles")
        XCTAssertEqual(b, "t.tiles0.pmtiles")
        XCTAssertEqual(ExportSpec(format: .site).outputName(id: "a.pmtiles"), "a.pmtiles.site")
        XCTAssertNotEqual(ExportSpec(format: .site).outputName(id: "a.pmtiles"), ExportSpec(format: .pmtiles).outputName(id: "a"))
        // Every pair of (id, spec) below maps to a distinct name.
        let ids = ["t", "t.tiles0", "t+x", "a.pmtiles", "a", "a.site", "a.db", "x.mbtiles"].filter(RequestValidator.isValidID)
        let specs = ExportFormat.allCases.flatMap { f in [ExportSpec(format: f)] + (f.isSingleSource ? [ExportSpec(format: f, source: "tiles0"), ExportSpec(format: f, source: "x.pmtiles")] : []) }
        var seen: [String: String] = [:]
        for id in ids { for s in specs {
            let n = s.outputName(id: id)
            if let other = seen[n] { XCTFail("\(n): \(other) and \(id) \(s)") }
            seen[n] = "\(id) \(s)"
        } }
    }

    // MARK: - Finding 9: exports follow the pack

    /// Exports added by a re-drop of the same download are written when the refresh it starts
    /// ends (nothing changed on the server); the first export's entry is not rewritten.
    func testExportsAddedOnAReDropAreWritten() throws {
        try completeToner(extra: ["exports": [["format": "mbtiles"]]])
        try waitUntil("the first export is written") { (fx.status("toner")?["exports"] as? [[String: Any]])?.first?["state"] as? String == "written" }
        let first = try XCTUnwrap((fx.status("toner")?["exports"] as? [[String: Any]])?.first)
        try fx.drop("toner.json", ["id": "toner", "tiles": [tonerTemplate], "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 2,
                                    "exports": [["format": "mbtiles"], ["format": "pmtiles"]]])
        try waitUntil("both exports are written after the refresh") {
            let e = fx.status("toner")?["exports"] as? [[String: Any]] ?? []
            return e.count == 2 && e.allSatisfy { $0["state"] as? String == "written" } && fx.state("toner") == "completed"
                && fx.events("toner").contains { $0["refresh"] as? String == "finished" }
        }
        let entries = try XCTUnwrap(fx.status("toner")?["exports"] as? [[String: Any]])
        XCTAssertEqual(entries[0]["sha256"] as? String, first["sha256"] as? String)
        let pm = try XCTUnwrap(entries[1]["path"] as? String)
        XCTAssertEqual(pm, fx.spool + "/exports/toner.pmtiles")
        XCTAssertEqual(entries[1]["sha256"] as? String, sha256sum([pm])[pm])
        XCTAssertEqual(entries[1]["tiles"] as? Int, 21)
    }

    /// A refresh swap finished at the next start (the daemon was killed after the swap's commit
    /// mark): the exports written from the old pack are written again from the new one.
    func testAKilledRefreshSwapLeavesNoStaleExport() throws {
        try completeToner(extra: ["exports": [["format": "mbtiles"]]])
        try waitUntil("the export is written") { (fx.status("toner")?["exports"] as? [[String: Any]])?.first?["state"] as? String == "written" }
        let before = try XCTUnwrap((fx.status("toner")?["exports"] as? [[String: Any]])?.first)
        fx.kill9()
        // The state of a refresh killed right after its commit mark: refresh/ holds the complete
        // new manifest (here: tile 2/0/0 now has the body of tile 1/0/0) and the mark.
        let dir = fx.store + "/regions/toner"
        let text = try String(contentsOfFile: dir + "/manifest.tsv", encoding: .utf8)
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let donor = try XCTUnwrap(lines.first { $0.contains("\ttiles0/1/0/0\t") }).split(separator: "\t").map(String.init)
        let changed = lines.map { l -> String in
            guard l.contains("\ttiles0/2/0/0\t") else { return l }
            var f = l.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
            f[1] = donor[1]; f[2] = donor[2]
            return f.joined(separator: "\t")
        }.joined(separator: "\n")
        try FileManager.default.createDirectory(atPath: dir + "/refresh", withIntermediateDirectories: true)
        try Data(changed.utf8).write(to: URL(fileURLWithPath: dir + "/refresh/manifest.tsv"))
        try Data(#"{"maxAge":null}"#.utf8).write(to: URL(fileURLWithPath: dir + "/refresh/refresh.json"))
        try Data().write(to: URL(fileURLWithPath: dir + "/refresh/commit"))
        try fx.start()
        try waitUntil("the export is written again from the new pack") {
            let e = (fx.status("toner")?["exports"] as? [[String: Any]])?.first
            return e?["state"] as? String == "written" && e?["pack"] as? String != before["pack"] as? String
        }
        let path = fx.spool + "/exports/toner.mbtiles"
        let donorBytes = try XCTUnwrap(fx.objectData(donor[1]))
        // MBTiles rows are TMS: tile 2/0/0 is row 3.
        XCTAssertEqual(try sqlite(path, "SELECT hex(tile_data) FROM tiles WHERE zoom_level = 2 AND tile_column = 0 AND tile_row = 3"),
                       donorBytes.map { String(format: "%02X", $0) }.joined())
        // The status said completed (no refresh under way): the swap is finished as a clean-up of
        // one already reported, and no second `refresh` event is written (attack round 17).
        XCTAssertEqual(fx.events("toner").filter { $0["refresh"] != nil }.count, 0)
        XCTAssertEqual(fx.state("toner"), "completed")
    }

    // MARK: - Finding 6: sprite URLs with a query

    /// `.../sprite?key=K` is fetched as `sprite.json?key=K`, `sprite@2x.png?key=K`, ... (MapLibre's
    /// rule), and the site export's style points at its own sprites, never at the keyed origin URL.
    func testSpriteURLsWithAQueryAreFetchedAsMapLibreDoes() throws {
        XCTAssertEqual(Planner.spriteURL("https://h/s/sprite?key=K", "@2x.png"), "https://h/s/sprite@2x.png?key=K")
        XCTAssertEqual(Planner.spriteURL("https://h/s/sprite#f", ".json"), "https://h/s/sprite.json#f")
        XCTAssertEqual(Planner.spriteURL("https://h/s/sprite", ".json"), "https://h/s/sprite.json")
        let styleFile = try String(contentsOf: MapData.packageRoot.appendingPathComponent("../shared/mapdata/styles/bright/style.local-template.json"), encoding: .utf8)
        var style = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(styleFile.replacingOccurrences(of: "__BASE__", with: nginx.baseURL).utf8)) as? [String: Any])
        let sprite = try XCTUnwrap(style["sprite"] as? String)
        style["sprite"] = sprite + "?key=SECRETKEY"
        // The keyed style served by a second server; everything it points at stays on the first.
        let docs = fx.root.appendingPathComponent("docs")
        try FileManager.default.createDirectory(at: docs.appendingPathComponent("keyed"), withIntermediateDirectories: true)
        try JSONKind.serialize(style).write(to: docs.appendingPathComponent("keyed/style.json"))
        let web = try NginxServer(root: docs)
        others.append(web)
        try fx.drop("keyed.json", ["style": web.baseURL + "/keyed/style.json", "bounds": [7.409205, 43.72335, 7.448637, 43.75169], "minZoom": 0, "maxZoom": 1])
        try fx.waitForState("keyed", "completed")
        XCTAssertEqual(fx.progress("keyed")["resourcesMissing"], 0)
        let spriteLines = fx.manifest("keyed").filter { $0.kind == "sprite" }
        XCTAssertEqual(spriteLines.count, 4)
        XCTAssertTrue(spriteLines.allSatisfy { $0.sha != "-" })
        let site = fx.root.appendingPathComponent("keyed-site").path
        let (rc, out) = try exportCLI(["keyed", "--format", "site", "--output", site])
        XCTAssertEqual(rc, 0, out)
        let written = try String(contentsOfFile: site + "/style.json", encoding: .utf8)
        XCTAssertFalse(written.contains("SECRETKEY"), written)
        XCTAssertTrue(written.contains("\"sprite\" : \"sprites/sprite\""), written)
    }
}

/// Unit tests of the escapers and the descriptor walk (issue 29, "close the classes").
final class TrustCoreTests: XCTestCase {
    func testNginxQuotingReadsBackAndRefusesWhatItCannotExpress() throws {
        XCTAssertEqual(try NginxConfig.quoted("/a b/{c};#d/", variablesExpanded: false), #""/a b/{c};#d/""#)
        XCTAssertEqual(try NginxConfig.quoted(#"/x"y\z/"#, variablesExpanded: true), #""/x\"y\\z/""#)
        XCTAssertEqual(try NginxConfig.quoted("/$x/", variablesExpanded: false), #""/$x/""#)
        XCTAssertThrowsError(try NginxConfig.quoted("/$x/", variablesExpanded: true))
        XCTAssertThrowsError(try NginxConfig.quoted("/a\nb/", variablesExpanded: false))
        XCTAssertThrowsError(try NginxConfig.quoted("/a\u{7F}/", variablesExpanded: false))
        // C1 controls too (attack round 2: a base URL with %C2%9B put a raw CSI into nginx.conf).
        XCTAssertThrowsError(try NginxConfig.quoted("/a\u{9B}/", variablesExpanded: false))
        XCTAssertEqual(try NginxConfig.quoted("/caf\u{E9}/", variablesExpanded: false), "\"/caf\u{E9}/\"")
        XCTAssertNotNil(ExportSpec.baseURLProblem("https://maps.example.org/a%C2%9Bb/"))
        XCTAssertNil(ExportSpec.baseURLProblem("https://maps.example.org/caf%C3%A9/"))
        XCTAssertEqual(NginxConfig.comment("a\nlocation / {"), "a?location / {")
        XCTAssertEqual(NginxConfig.comment("a\u{9B}b"), "a?b")
    }

    func testTSVFieldsNeverSplit() {
        XCTAssertEqual(TSV.field("a\tb\nc\rd"), "a%09b%0Ac%0Dd")
        XCTAssertEqual(TSV.field("plain"), "plain")
    }

    func testBaseURLProblems() {
        XCTAssertNil(ExportSpec.baseURLProblem("https://maps.example.org/site/"))
        XCTAssertNotNil(ExportSpec.baseURLProblem("https://u:p@maps.example.org/site/"))
        XCTAssertNotNil(ExportSpec.baseURLProblem("https://maps.example.org/site/?token=x"))
        XCTAssertNotNil(ExportSpec.baseURLProblem("https://maps.example.org/a%0Ab/"))
        XCTAssertNotNil(ExportSpec.baseURLProblem("ftp://maps.example.org/"))
        XCTAssertNil(ExportSpec.baseURLProblem("https://maps.example.org/a%7B%7D%3B/"))
    }

    func testReconcileWritesWhatIsMissingOrStale() {
        let a = ExportSpec(format: .mbtiles), b = ExportSpec(format: .pmtiles, source: "s"), c = ExportSpec(format: .site)
        let written: (ExportSpec, String) -> [String: Any] = { s, v in
            var o = s.jsonObject; o["state"] = "written"; o["pack"] = v; o["path"] = "/x/\(s.format.rawValue)"; return o
        }
        let entries = [written(a, "v1"), written(b, "v0"), { var o = written(c, "v1"); o["state"] = "writing"; return o }()]
        XCTAssertEqual(ExportReconcile.due(specs: [a, b, c], entries: entries, packVersion: "v1") { _ in true }, [false, true, true])
        XCTAssertEqual(ExportReconcile.due(specs: [a], entries: entries, packVersion: "v1") { _ in false }, [true])
        XCTAssertEqual(ExportReconcile.due(specs: [a, ExportSpec(format: .maplibre)], entries: entries, packVersion: "v1") { _ in true }, [false, true])
        XCTAssertEqual(ExportReconcile.due(specs: [a], entries: nil, packVersion: "v1") { _ in true }, [true])
        XCTAssertEqual(ExportReconcile.due(specs: [a], entries: entries, packVersion: nil) { _ in true }, [true])
        // The status names the source exported; the request left it to the default: the entry's
        // `spec` is what it is matched by.
        var resolved = written(a, "v1")
        resolved["source"] = "openmaptiles"
        resolved["spec"] = a.jsonObject
        XCTAssertEqual(ExportReconcile.due(specs: [a], entries: [resolved], packVersion: "v1") { _ in true }, [false])
    }

    /// Finding 4: a tree someone else can write changes while it is removed (a folder in it
    /// swapped, atomically and again and again from another thread, with a symlink to a folder
    /// outside): the files outside survive every round. A walk by path (`lstat`, then `opendir`
    /// of the same path) follows the swapped-in link now and then and empties the folder outside.
    func testRemoveTreeRacingASymlinkSwapNeverLeavesTheTree() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("tilespool-race-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: root) }
        let outside = root + "/outside", stage = root + "/stage"
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: stage, withIntermediateDirectories: true)
        final class Flag: @unchecked Sendable {
            var stop = false
            var tree: Directory?, stage: Directory?
            let started = DispatchSemaphore(value: 0), done = DispatchSemaphore(value: 0)
        }
        let flag = Flag()
        /// Spins for about `us` microseconds (no syscall, so the other thread's timing is its own).
        @Sendable func spin(_ us: Double) { let end = Date().addingTimeInterval(us / 1e6); while Date() < end {} }
        var rounds = 0
        let deadline = Date().addingTimeInterval(4)
        while Date() < deadline && rounds < 3000 {
            rounds += 1
            for i in 0..<8 { FileManager.default.createFile(atPath: "\(outside)/f\(i)", contents: Data("keep".utf8)) }
            let tree = "\(root)/t\(rounds)"
            try FileManager.default.createDirectory(atPath: tree + "/d", withIntermediateDirectories: true)
            for i in 0..<8 { FileManager.default.createFile(atPath: "\(tree)/d/g\(i)", contents: Data()) }
            try? FileManager.default.removeItem(atPath: stage + "/d") // the folder or the link a round left there
            XCTAssertEqual(symlink(outside, stage + "/d"), 0)
            flag.tree = try Directory(path: tree)
            flag.stage = try Directory(path: stage)
            flag.stop = false
            let swapper = Thread {
                var signalled = false
                // tree/d <-> stage/d: a folder and a symlink to `outside` trade places atomically.
                while !flag.stop, (try? flag.stage!.rename("d", to: flag.tree!, "d", mode: .exchange)) != nil {
                    spin(Double.random(in: 20...200))
                    if !signalled { signalled = true; flag.started.signal() }
                }
                if !signalled { flag.started.signal() }
                flag.done.signal()
            }
            swapper.start()
            flag.started.wait() // the swapping is under way before the walk starts
            Files.removeTree(tree)
            flag.stop = true
            flag.done.wait()
            let left = (try? FileManager.default.contentsOfDirectory(atPath: outside)) ?? []
            XCTAssertEqual(left.count, 8, "round \(rounds): the walk went into the folder outside")
            if left.count != 8 { break }
            try? FileManager.default.removeItem(atPath: tree)
        }
    }

    /// `Files.removeTree` deletes a tree holding symlinks to a folder outside it without entering
    /// them, and a folder swapped for a symlink is removed as a link.
    func testRemoveTreeNeverFollowsASymlink() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("tilespool-rt-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: root) }
        try FileManager.default.createDirectory(atPath: root + "/outside/keep", withIntermediateDirectories: true)
        try Data("x".utf8).write(to: URL(fileURLWithPath: root + "/outside/keep/file"))
        try FileManager.default.createDirectory(atPath: root + "/tree/a/b", withIntermediateDirectories: true)
        XCTAssertEqual(symlink(root + "/outside", root + "/tree/a/b/out"), 0)
        XCTAssertEqual(symlink(root + "/outside/keep/file", root + "/tree/file-link"), 0)
        XCTAssertEqual(symlink(root + "/outside", root + "/top-link"), 0)
        Files.removeTree(root + "/tree")
        Files.removeTree(root + "/top-link")
        XCTAssertFalse(FileManager.default.fileExists(atPath: root + "/tree"))
        XCTAssertNil(try? FileManager.default.destinationOfSymbolicLink(atPath: root + "/top-link"))
        XCTAssertEqual(try String(contentsOfFile: root + "/outside/keep/file", encoding: .utf8), "x")
    }
}
