// The fields of a request file beside its id, source and region (docs/contract.md, "The request
// file"): each declared once, with how it is read, how it is written back, and whether it
// changes what is fetched. `RequestValidator.validate` reads them, `RegionRequest.jsonObject`
// writes them, `RequestValidator.knownFields` and `RegionRequest.notFetchedFields` list them.
import Foundation

/// One field of a request: a property of `RegionRequest` with its default there. A new field is
/// that property, one entry of `RequestField.all`, and its row in contract.md's request table
/// (`StatusModelTests.testRequestFieldsAreTheContractsFields` keeps the table and `knownFields` equal).
public struct RequestField: Sendable {
    /// The JSON key.
    public let name: String
    /// False when a request that differs only here downloads the same (a re-drop refreshes):
    /// `context`, `exports`, `refreshAfter`, `maxRequestsPerSecond`, `allowEmpty`.
    public let changesWhatIsFetched: Bool
    /// Checks the value (never JSON `null`, which is the default: the field is left as it is) and
    /// sets it on the request (whose id, source, region and zooms are set).
    /// - Throws: `RegionError` `invalidRequest` naming the field.
    public let read: @Sendable (Any, inout RegionRequest) throws(RegionError) -> Void
    /// Writes the field into the request's JSON object (`jsonObject`), or nothing when it is at
    /// a default the object leaves out.
    public let write: @Sendable (RegionRequest, inout [String: Any]) -> Void

    init(_ name: String, fetched: Bool = true,
         read: @escaping @Sendable (Any, inout RegionRequest) throws(RegionError) -> Void,
         write: @escaping @Sendable (RegionRequest, inout [String: Any]) -> Void) {
        self.name = name; self.changesWhatIsFetched = fetched; self.read = read; self.write = write
    }

    static func bad(_ message: String) -> RegionError { RegionError(code: .invalidRequest, message: message) }

    /// Every field beside `id`, `style`/`tiles`, `bounds`/`geometry`/`corridor`/`parts` and
    /// `minZoom`/`maxZoom`, in the order they are checked (the first bad one is reported).
    public static let all: [RequestField] = [
        RequestField("pixelRatio", read: { v, r throws(RegionError) in
            guard let d = JSONKind.number(v), d.isFinite, d > 0, d <= 4 else { throw bad("pixelRatio: must be a number in (0, 4]") }
            r.pixelRatio = d
        }, write: { r, o in o["pixelRatio"] = r.pixelRatio }),
        RequestField("includeIdeographs", read: { v, r throws(RegionError) in
            guard JSONKind.isBool(v), let flag = v as? Bool else { throw bad("includeIdeographs: must be true or false, not a \(JSONKind.name(v))") }
            r.includeIdeographs = flag
        }, write: { r, o in o["includeIdeographs"] = r.includeIdeographs }),
        RequestField("maxTiles", read: { v, r throws(RegionError) in
            guard let n = JSONKind.count(v) else { throw bad("maxTiles: must be a non-negative integer") }
            r.maxTiles = n
        }, write: { r, o in o["maxTiles"] = r.maxTiles.map { $0 as Any } ?? NSNull() }),
        RequestField("context", fetched: false, read: { v, r throws(RegionError) in
            r.contextJSON = JSONKind.serialize(v)
        }, write: { r, o in o["context"] = r.context }),
        RequestField("exports", fetched: false, read: { v, r throws(RegionError) in
            switch ExportSpec.parseList(v) {
            case .success(let list): r.exports = list
            case .failure(let e): throw bad(e.message)
            }
            if case .tiles = r.source, r.exports.contains(where: { $0.format == .maplibre }) {
                throw bad("exports: the maplibre format needs a style request (a MapLibre region names a style URL)")
            }
        }, write: { r, o in if !r.exports.isEmpty { o["exports"] = r.exports.map(\.jsonObject) } }),
        RequestField("refreshAfter", fetched: false, read: { v, r throws(RegionError) in
            guard let n = JSONKind.count(v), n >= 60 else { throw bad("refreshAfter: must be an integer number of seconds, at least 60") }
            r.refreshAfter = n
        }, write: { r, o in if let s = r.refreshAfter { o["refreshAfter"] = s } }),
        RequestField("emptyStatuses", read: { v, r throws(RegionError) in
            guard let arr = v as? [Any], arr.count <= 32 else { throw bad("emptyStatuses: must be an array of at most 32 HTTP statuses, e.g. [204, 404]") }
            var list: [Int] = []
            for (i, e) in arr.enumerated() {
                guard let n = JSONKind.integer(e), n == 204 || ((400...499).contains(n) && n != 429) else {
                    throw bad("emptyStatuses[\(i)]: must be 204 or a 4xx status other than 429 (which is retried)")
                }
                if !list.contains(n) { list.append(n) }
            }
            r.emptyStatuses = list.sorted()
        }, write: { r, o in if r.emptyStatuses != RegionRequest.defaultEmptyStatuses { o["emptyStatuses"] = r.emptyStatuses } }),
        RequestField("headers", read: { v, r throws(RegionError) in
            guard let obj = v as? [String: Any] else { throw bad("headers: must be an object of header names to string values, not a \(JSONKind.name(v))") }
            guard obj.count <= 32 else { throw bad("headers: at most 32 headers") }
            let token = Set("!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz".utf8)
            var headers: [String: String] = [:]
            var names: [String: String] = [:] // lower-cased -> as given
            for (name, value) in obj.sorted(by: { $0.key < $1.key }) {
                // Header names are case-insensitive (RFC 9110 section 5.1): two spellings of one
                // name would both be sent, one header twice (attack round 39).
                if let other = names.updateValue(name, forKey: name.lowercased()) {
                    throw bad("headers: '\(other)' and '\(name)' name one header (header names are case-insensitive, RFC 9110 section 5.1); give it once")
                }
                guard !name.isEmpty, name.utf8.count <= 64, name.utf8.allSatisfy(token.contains) else {
                    throw bad("headers: '\(name.prefix(64))' is not a valid header name (RFC 9110 token)")
                }
                guard !RequestValidator.reservedHeaders.contains(name.lowercased()) else { throw bad("headers: \(name) is set by the daemon and cannot be given") }
                // The value is a credential: messages name the header, never the value.
                guard let s = value as? String else { throw bad("headers: \(name): the value must be a string, not a \(JSONKind.name(value))") }
                guard s.utf8.count <= 8192, !s.utf8.contains(where: { $0 == 0x0D || $0 == 0x0A || $0 == 0 }) else {
                    throw bad("headers: \(name): the value must be at most 8192 bytes without CR, LF or NUL")
                }
                headers[name] = s
            }
            r.headers = headers
        }, write: { r, o in if !r.headers.isEmpty { o["headers"] = r.headers } }),
        RequestField("maxFailedTiles", read: { v, r throws(RegionError) in
            guard let n = JSONKind.count(v) else { throw bad("maxFailedTiles: must be a non-negative integer") }
            r.maxFailedTiles = n
        }, write: { r, o in if r.maxFailedTiles != 0 { o["maxFailedTiles"] = r.maxFailedTiles } }),
        RequestField("subdomains", read: { v, r throws(RegionError) in
            guard let arr = v as? [Any], (1...26).contains(arr.count) else { throw bad("subdomains: must be an array of 1 to 26 strings, e.g. [\"a\", \"b\", \"c\"]") }
            var subdomains: [String] = []
            let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.".utf8)
            for (i, e) in arr.enumerated() {
                guard let s = e as? String, (1...63).contains(s.utf8.count), s.utf8.allSatisfy(allowed.contains) else {
                    throw bad("subdomains[\(i)]: must be 1 to 63 letters, digits, '-' or '.'")
                }
                subdomains.append(s)
            }
            r.subdomains = subdomains
        }, write: { r, o in if r.subdomains != TileURLTemplate.defaultSubdomains { o["subdomains"] = r.subdomains } }),
        RequestField("maxRequestsPerSecond", fetched: false, read: { v, r throws(RegionError) in
            guard let d = JSONKind.number(v), d.isFinite, d >= 0.01, d <= 10_000 else {
                throw bad("maxRequestsPerSecond: must be a number of requests per second in 0.01...10000")
            }
            r.maxRequestsPerSecond = d
        }, write: { r, o in if let d = r.maxRequestsPerSecond { o["maxRequestsPerSecond"] = d } }),
        RequestField("allowEmpty", fetched: false, read: { v, r throws(RegionError) in
            guard JSONKind.isBool(v), let flag = v as? Bool else { throw bad("allowEmpty: must be true or false, not a \(JSONKind.name(v))") }
            r.allowEmpty = flag
        }, write: { r, o in if r.allowEmpty { o["allowEmpty"] = true } }),
    ]
}
