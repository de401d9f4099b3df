// One escaper per format TileSpool writes for another program to read. Each takes any string
// and returns text that the reader takes back as that string, or refuses what the format cannot
// express. JSON goes through JSONSerialization (`JSONKind.serialize`), logfmt through `LogFmt`,
// Prometheus labels through `PrometheusText`; the two below are the rest: nginx configuration
// (the site export's `nginx.conf`) and TSV fields (manifests, `failed.tsv`). Hook arguments are
// passed as an argument vector, never through a shell (`Spawn`), so they need none.
import Foundation

/// A value an escaper cannot express in its format.
public struct EscapeError: Error, Sendable, Equatable, CustomStringConvertible {
    public var message: String
    public init(_ m: String) { message = m }
    public var description: String { message }
}

/// Strings for nginx configuration files.
///
/// nginx reads a double-quoted token with `\"` and `\\` unescaped, and `{`, `}`, `;`, `#` and
/// spaces taken literally (`ngx_conf_read_token`, src/core/ngx_conf_file.c). A directive whose
/// value is a "complex value" (`alias`, `root`, `return`, ...) expands `$name` as a variable there,
/// and nginx has no escape for `$`; control characters are legal in a quoted token but would
/// break the comment lines of a snippet. So `quoted` escapes `\` and `"`, and refuses control
/// characters, and `$` where variables are expanded.
public enum NginxConfig {
    /// `s` as one double-quoted nginx token that reads back as exactly `s`.
    /// - Parameter variablesExpanded: true for a directive that expands variables (`alias`): a
    ///   `$` is then refused.
    /// - Throws: `EscapeError` for a NUL or other control character (Unicode category Cc:
    ///   U+0000-U+001F, U+007F, U+0080-U+009F), and for `$` when `variablesExpanded`.
    public static func quoted(_ s: String, variablesExpanded: Bool) throws(EscapeError) -> String {
        var out = "\""
        for u in s.unicodeScalars {
            if isCc(u) {
                throw EscapeError("a control character (U+\(String(format: "%04X", u.value))) cannot be written in an nginx configuration")
            }
            if u == "$" && variablesExpanded {
                throw EscapeError("'$' cannot be written where nginx expands variables (it has no escape for it)")
            }
            if u == "\\" || u == "\"" { out += "\\" }
            out.unicodeScalars.append(u)
        }
        return out + "\""
    }

    /// `s` for a `#` comment line: control characters (a newline would end the comment) become
    /// `?`. Comments are for people; nothing in them is read by nginx.
    public static func comment(_ s: String) -> String {
        String(String.UnicodeScalarView(s.unicodeScalars.map { isCc($0) ? "?" : $0 }))
    }

    /// A control character (Unicode general category Cc): C0, DEL or C1.
    static func isCc(_ u: Unicode.Scalar) -> Bool { u.value < 0x20 || (0x7F...0x9F).contains(u.value) }
}

/// Fields of the tab-separated files TileSpool writes (manifests, `failed.tsv`): a field never
/// holds a TAB, LF or CR; they are written percent-encoded (`%09`, `%0A`, `%0D`), as in a URL, so
/// `cut -f` and `awk -F'\t'` always see the same columns.
public enum TSV {
    /// `s` with TAB, LF and CR percent-encoded.
    public static func field(_ s: String) -> String {
        guard s.utf8.contains(where: { $0 == 0x09 || $0 == 0x0A || $0 == 0x0D }) else { return s }
        return s.replacingOccurrences(of: "\t", with: "%09").replacingOccurrences(of: "\n", with: "%0A")
            .replacingOccurrences(of: "\r", with: "%0D")
    }
}

/// Text for a terminal: what `tilespool status`, `plan` and the other commands print comes in part
/// from servers (error messages, Content-Types, style source names): C0 control characters
/// (U+0000-U+001F but the newline and tab the command itself prints), DEL and the C1 range
/// (U+0080-U+009F) and the bidirectional and separator characters of `isInvisibleControl` are
/// written as `\u{1B}` and the like, so no answer can move the cursor, clear the screen, set the
/// window title or show its text in another order.
public enum TerminalText {
    /// `s` with every control character but `\n` and `\t` written as `\u{XX}`.
    public static func safe(_ s: String) -> String {
        guard s.unicodeScalars.contains(where: isControl) else { return s }
        var out = ""
        for u in s.unicodeScalars {
            if isControl(u) { out += "\\u{" + String(u.value, radix: 16, uppercase: true) + "}" } else { out.unicodeScalars.append(u) }
        }
        return out
    }

    /// A name from a document quoted inside a one-line message (a JSON key, a field name): as
    /// `safe`, and the newline and tab written as `\u{A}` and `\u{9}` too, so that a name cannot
    /// add a line to a status, a `.error` file or a terminal (attack round 39).
    public static func inline(_ s: String) -> String {
        safe(s).replacingOccurrences(of: "\n", with: "\\u{A}").replacingOccurrences(of: "\t", with: "\\u{9}")
    }

    /// JSON text `json` with every character `safe` would escape written as a JSON escape
    /// (`\u2028`, `\u001b`: RFC 8259 section 7), so that the document is still valid JSON with
    /// the same value and shows on a terminal as what it is. Such characters only occur inside
    /// strings, where an escape stands for them. For JSON printed by the command line.
    public static func safeJSON(_ json: String) -> String {
        guard json.unicodeScalars.contains(where: isControl) else { return json }
        var out = ""
        for u in json.unicodeScalars {
            if isControl(u) {
                let hex = String(u.value, radix: 16, uppercase: false)
                out += "\\u" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
            } else {
                out.unicodeScalars.append(u)
            }
        }
        return out
    }

    static func isControl(_ u: Unicode.Scalar) -> Bool {
        (u.value < 0x20 && u != "\n" && u != "\t") || u.value == 0x7F || isInvisibleControl(u)
    }

    /// True for the characters above U+007F that change how a terminal or viewer shows the text
    /// around them rather than showing themselves: the C1 controls (U+0080-U+009F), the
    /// bidirectional formatting characters that can make text read in another order than it is
    /// (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069: Unicode Standard Annex #9; the
    /// "Trojan Source" attack, CVE-2021-42574), and the line and paragraph separators U+2028,
    /// U+2029. `safe` and the log's logfmt (`LogFmt.value`) write them as escapes.
    public static func isInvisibleControl(_ u: Unicode.Scalar) -> Bool {
        switch u.value {
        case 0x80...0x9F, 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069, 0x2028, 0x2029: return true
        default: return false
        }
    }
}
