import Foundation

/// Helpers over the values `JSONSerialization` returns, so that the rest of the core reads JSON
/// with exact types. `JSONSerialization` (Foundation) does the parsing; this file only classifies.
public enum JSONKind {
    /// True when `v` is a JSON `true`/`false` (Foundation gives booleans as an NSNumber of ObjC type "c").
    public static func isBool(_ v: Any) -> Bool {
        guard let n = v as? NSNumber else { return false }
        return String(cString: n.objCType) == "c"
    }

    /// A JSON number (not a boolean) as a Double, or nil.
    public static func number(_ v: Any) -> Double? {
        guard let n = v as? NSNumber, !isBool(v) else { return nil }
        return n.doubleValue
    }

    /// A JSON number that is a whole number within Int's range, or nil.
    public static func integer(_ v: Any) -> Int? {
        guard let d = number(v), d.rounded() == d, abs(d) < 9.0e15 else { return nil }
        return Int(d)
    }

    /// A JSON number that is a whole number of at least 0, for a count or a limit: `Int.max`
    /// (no limit) for one beyond 9e15, where a Double no longer holds every integer (2^53 was
    /// refused as "not a non-negative integer": attack round 10); nil for anything else.
    public static func count(_ v: Any) -> Int? {
        if let n = v as? NSNumber, !isBool(v), !(v is NSDecimalNumber) {
            // An integer as JSONSerialization read it: exact, whatever its size.
            switch String(cString: n.objCType) {
            case "q", "l", "i", "s", "c": return n.int64Value >= 0 ? Int(n.int64Value) : nil
            case "Q", "L", "I", "S", "C": return n.uint64Value > UInt64(Int.max) ? Int.max : Int(n.uint64Value)
            default: break
            }
        }
        guard let d = number(v), d.isFinite, d >= 0, d.rounded() == d else { return nil }
        return d < 9.0e15 ? Int(d) : Int.max
    }

    /// The JSON type name of `v` for error messages ("string", "number", "boolean", ...).
    public static func name(_ v: Any) -> String {
        if isBool(v) { return "boolean" }
        if v is NSNumber { return "number" }
        if v is String { return "string" }
        if v is [Any] { return "array" }
        if v is [String: Any] { return "object" }
        if v is NSNull { return "null" }
        return "value"
    }

    /// The deepest nesting of arrays and objects in the JSON text `data`, counted without parsing
    /// (strings and escapes are skipped). Used to refuse absurdly nested input before
    /// `JSONSerialization` recurses into it.
    public static func nestingDepth(_ data: Data) -> Int {
        var depth = 0, deepest = 0
        var inString = false, escaped = false
        for b in data {
            if inString {
                if escaped { escaped = false } else if b == UInt8(ascii: "\\") { escaped = true } else if b == UInt8(ascii: "\"") { inString = false }
                continue
            }
            switch b {
            case UInt8(ascii: "\""): inString = true
            case UInt8(ascii: "["), UInt8(ascii: "{"):
                depth += 1
                deepest = max(deepest, depth)
            case UInt8(ascii: "]"), UInt8(ascii: "}"): depth -= 1
            default: break
            }
        }
        return deepest
    }

    /// The byte offset of the first trailing comma in the JSON text `data` (a `,` followed by
    /// nothing but whitespace up to a `]` or `}`), outside strings, and that closing byte; nil when
    /// there is none. RFC 8259 (sections 4 and 5) allows no such comma; Foundation's
    /// `JSONSerialization` on Linux accepts it, so `parse` refuses it with this scan (strings and
    /// escapes are skipped as in `nestingDepth`). Offsets count from the first byte of `data`.
    public static func trailingComma(_ data: Data) -> (offset: Int, closer: UInt8)? {
        var inString = false, escaped = false
        var comma: Int?
        for (i, b) in data.enumerated() {
            if inString {
                if escaped { escaped = false } else if b == UInt8(ascii: "\\") { escaped = true } else if b == UInt8(ascii: "\"") { inString = false }
                continue
            }
            switch b {
            case 0x20, 0x0A, 0x0D, 0x09: continue
            case UInt8(ascii: ","): comma = i
            case UInt8(ascii: "]"), UInt8(ascii: "}"):
                if let c = comma { return (c, b) }
            case UInt8(ascii: "\""): inString = true; comma = nil
            default: comma = nil
            }
        }
        return nil
    }

    /// The line and column, both from 1, of the byte at `offset` in `data`, as an editor shows
    /// them: a line ends at each LF; a column counts characters (UTF-8 sequences: continuation
    /// bytes do not count), a tab or a CR as one. An offset at or past the end gives the position
    /// just after the last byte.
    public static func position(ofByte offset: Int, in data: Data) -> (line: Int, column: Int) {
        var line = 1, column = 1
        for (i, b) in data.enumerated() {
            if i >= offset { break }
            if b == 0x0A { line += 1; column = 1 } else if b & 0xC0 != 0x80 { column += 1 }
        }
        return (line, column)
    }

    /// `JSONSerialization`'s error text with its byte offset (Foundation on Linux gives it only
    /// inside `NSDebugDescription`: "... around character N.", "... starting from character N.",
    /// "... at N.", counted in UTF-8 bytes from 0, after a byte order mark) replaced by
    /// "at line L, column C" of `text`, the document without its byte order mark. Text without
    /// such an offset, or with one past the end, is returned as it is.
    static func withLineAndColumn(_ detail: String, in text: Data) -> String {
        guard let re = try? NSRegularExpression(pattern: "(?:around character|from character|at) ([0-9]+)\\.?$"),
              let m = re.firstMatch(in: detail, range: NSRange(detail.startIndex..., in: detail)),
              let whole = Range(m.range, in: detail), let digits = Range(m.range(at: 1), in: detail),
              let offset = Int(detail[digits]), offset <= text.count else { return detail }
        let (line, column) = position(ofByte: offset, in: text)
        return detail.replacingCharacters(in: whole, with: "at line \(line), column \(column)")
    }

    /// Parses `data` as a JSON document with `JSONSerialization`, refusing nesting deeper than
    /// `maxDepth` and a trailing comma (RFC 8259 allows none; `JSONSerialization` on Linux
    /// accepts one). Throws `JSONDocumentError` with a message fit for a status file, naming the
    /// line and column of the fault (e.g. `not valid JSON: Invalid value at line 3, column 12`,
    /// `not valid JSON: trailing comma at line 4, column 9 (before ']')`).
    public static func parse(_ data: Data, maxDepth: Int = 64) throws(JSONDocumentError) -> Any {
        if data.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }) {
            throw JSONDocumentError(message: "empty")  // read as "the request is empty", "the style is empty"
        }
        let depth = nestingDepth(data)
        if depth > maxDepth {
            throw JSONDocumentError(message: "JSON nested \(depth) levels deep (at most \(maxDepth))")
        }
        // A UTF-8 byte order mark (RFC 8259 section 8.1 lets a parser ignore it, as Foundation
        // does) is not part of the text that lines and columns count.
        let text = data.starts(with: [0xEF, 0xBB, 0xBF]) ? Data(data.dropFirst(3)) : data
        let value: Any
        do {
            value = try JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed])
        } catch {
            let detail = (error as NSError).userInfo[NSDebugDescriptionErrorKey] as? String
            throw JSONDocumentError(message: "not valid JSON" + (detail.map { ": " + withLineAndColumn($0, in: text) } ?? ""))
        }
        if let comma = trailingComma(text) {
            let (line, column) = position(ofByte: comma.offset, in: text)
            throw JSONDocumentError(message: "not valid JSON: trailing comma at line \(line), column \(column) (before '\(Character(Unicode.Scalar(comma.closer)))')")
        }
        return value
    }

    /// Serialises a JSON object (dictionaries, arrays, strings, numbers, NSNull) with sorted keys.
    public static func serialize(_ object: Any, pretty: Bool = false) -> Data {
        var options: JSONSerialization.WritingOptions = [.sortedKeys, .fragmentsAllowed, .withoutEscapingSlashes]
        if pretty { options.insert(.prettyPrinted) }
        return (try? JSONSerialization.data(withJSONObject: object, options: options)) ?? Data("null".utf8)
    }
}

/// A JSON document that could not be read: empty, malformed, or too deeply nested.
public struct JSONDocumentError: Error, Sendable {
    public var message: String
}
