// Reading events.jsonl as it grows, from a point on (what `tail -F` does), across the daemon's
// rotation to events.jsonl.1 (`StatusWriter.rotateEvents`).
import CLinux
import Foundation
import Glibc
import TileSpoolCore

/// Follows `<spool>/events.jsonl` from where it ended when made: `poll()` returns the complete
/// lines appended since, parsed, in order. When the daemon rotates the file (renames it to
/// `events.jsonl.1`, `.1` to `.2`, ..., and starts a new one), the rest of the old file is read
/// through the open descriptor, then every file made and rotated since (found among
/// `events.jsonl.1`, `.2`, ... above the old one), then the new file from its start. Lines in
/// files rotated out of `--events-keep` before a poll are lost. A partial last line is kept
/// until its newline arrives. Not thread-safe; one reader.
public final class EventsFollower {
    /// The followed file, `<spool>/events.jsonl`.
    public let path: String
    private var fd: Int32 = -1
    private var offset: off_t = 0
    private var partial: [UInt8] = []
    /// Tests only: called after the file the path names is opened, before the rotated files are
    /// listed (where a rotation by the daemon meanwhile must lose nothing).
    var beforeListingRotated: (() -> Void)?

    /// Opens `path` if it exists and starts at its current end (a file made later is read from
    /// its start).
    public init(path: String) {
        self.path = path
        if let opened = try? Files.open(path, O_RDONLY) {
            fd = opened
            var st = stat()
            offset = fstat(fd, &st) == 0 ? st.st_size : 0
        }
    }
    deinit { if fd >= 0 { close(fd) } }

    /// The event lines appended since the last call (objects; a line that is not a JSON object is
    /// skipped). The corresponding C functions are `pread`, `fstat` and `stat`.
    public func poll() -> [[String: Any]] {
        pollLines().compactMap { (try? JSONKind.parse($0)) as? [String: Any] }
    }

    /// The events appended since the last call (`StatusCoding.event`; a line that is not an
    /// event is skipped).
    public func pollEvents() -> [StatusEvent] { pollLines().compactMap(StatusCoding.event) }

    /// The whole lines appended since the last call, without their newlines.
    func pollLines() -> [Data] {
        var lines: [Data] = []
        while true {
            if fd < 0 {
                guard let opened = try? Files.open(path, O_RDONLY) else { return lines }
                fd = opened
                offset = 0
                partial.removeAll()
            }
            readToEnd(into: &lines)
            // The file the path names now, opened before the rotated files are looked for: the
            // daemon may rotate again meanwhile, and then this one is among them, not lost.
            guard let current = try? Files.open(path, O_RDONLY) else { return lines }
            var mine = stat(), now = stat()
            guard fstat(fd, &mine) == 0, fstat(current, &now) == 0 else { close(current); return lines }
            if mine.st_ino == now.st_ino && mine.st_dev == now.st_dev { close(current); return lines }
            // Rotated: what the old file held was read above. The files made between it and
            // `current` are among events.jsonl.1, .2, ... (newest first): those after `current`
            // (if it was rotated too) and before the old one (or all, if it is gone).
            close(fd)
            beforeListingRotated?()
            var between: [Int32] = []
            for n in 1...1000 {
                guard let f = try? Files.open("\(path).\(n)", O_RDONLY) else { break }
                var st = stat()
                guard fstat(f, &st) == 0 else { close(f); break }
                if st.st_ino == mine.st_ino && st.st_dev == mine.st_dev { close(f); break }
                if st.st_ino == now.st_ino && st.st_dev == now.st_dev {
                    // `current` was rotated meanwhile: only files older than it come before it.
                    for g in between { close(g) }
                    between = []
                    close(f)
                    continue
                }
                between.append(f)
            }
            for f in between.reversed() {
                fd = f
                offset = 0
                partial.removeAll()
                readToEnd(into: &lines)
                close(f)
            }
            fd = current
            offset = 0
            partial.removeAll()
        }
    }

    private func readToEnd(into lines: inout [Data]) {
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, offset) }
            if n < 0 && CLinux.tilespool_errno() == EINTR { continue }
            if n <= 0 { return }
            offset += off_t(n)
            for b in buffer[0..<n] {
                if b != 0x0A { partial.append(b); continue }
                lines.append(Data(partial))
                partial.removeAll(keepingCapacity: true)
            }
        }
    }
}
