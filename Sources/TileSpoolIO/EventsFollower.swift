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
        var lines: [[String: Any]] = []
        while true {
            if fd < 0 {
                guard let opened = try? Files.open(path, O_RDONLY) else { return lines }
                fd = opened
                offset = 0
                partial.removeAll()
            }
            readToEnd(into: &lines)
            // Rotated (or removed and made again): the path names another file now. What the old
            // one held was read above; the files made since it, then the new one, follow.
            var mine = stat(), named = stat()
            guard fstat(fd, &mine) == 0, stat(path, &named) == 0, mine.st_ino != named.st_ino || mine.st_dev != named.st_dev else {
                return lines
            }
            close(fd)
            var newer: [Int32] = []  // events.jsonl.1, .2, ... up to the old file (or all, if it is gone)
            for n in 1...1000 {
                guard let f = try? Files.open("\(path).\(n)", O_RDONLY) else { break }
                var st = stat()
                if fstat(f, &st) != 0 || (st.st_ino == mine.st_ino && st.st_dev == mine.st_dev) { close(f); break }
                newer.append(f)
            }
            for f in newer.reversed() {
                fd = f
                offset = 0
                partial.removeAll()
                readToEnd(into: &lines)
                close(f)
            }
            fd = -1
        }
    }

    private func readToEnd(into lines: inout [[String: Any]]) {
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, offset) }
            if n < 0 && CLinux.tilespool_errno() == EINTR { continue }
            if n <= 0 { return }
            offset += off_t(n)
            for b in buffer[0..<n] {
                if b != 0x0A { partial.append(b); continue }
                if let o = (try? JSONKind.parse(Data(partial))) as? [String: Any] { lines.append(o) }
                partial.removeAll(keepingCapacity: true)
            }
        }
    }
}
