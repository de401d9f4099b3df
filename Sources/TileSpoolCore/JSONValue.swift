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

    /// `name` with its article, for messages: `a string`, `an array`, `null`.
    public static func aName(_ v: Any) -> String {
        let n = name(v)
        return n == "null" ? "null" : (n.first.map { "aeiou".contains($0) } == true ? "an " : "a ") + n
    }

    /// A lexical token of JSON text (`forEachToken`): a string, quotes included (`start` is the
    /// offset of its opening quote, `end` one past its closing one, or the end of the text for
    /// one never closed), one of the punctuation bytes `{ } [ ] , :`, or any other byte outside
    /// strings and whitespace (numbers, `true`, stray bytes).
    enum Token {
        case string(start: Int, end: Int)
        case punctuation(UInt8, offset: Int)
        case other(offset: Int)
    }

    /// Calls `body` with each token of the JSON text `bytes` in order, until it returns false:
    /// the one walk over strings and their escapes (`\"` does not end a string) behind the
    /// checks `parse` adds to `JSONSerialization` (nesting, trailing commas, repeated keys, lone
    /// surrogates). Works on any bytes, well-formed JSON or not; O(n).
    static func forEachToken(_ bytes: [UInt8], _ body: (Token) -> Bool) {
        var i = 0
        while i < bytes.count {
            let b = bytes[i]
            let token: Token
            switch b {
            case 0x20, 0x0A, 0x0D, 0x09:
                i += 1
                continue
            case UInt8(ascii: "\""):
                let start = i
                var escaped = false
                i += 1
                while i < bytes.count {
                    let c = bytes[i]
                    i += 1
                    if escaped { escaped = false } else if c == UInt8(ascii: "\\") { escaped = true } else if c == UInt8(ascii: "\"") { break }
                }
                token = .string(start: start, end: i)
            case UInt8(ascii: "{"), UInt8(ascii: "}"), UInt8(ascii: "["), UInt8(ascii: "]"), UInt8(ascii: ","), UInt8(ascii: ":"):
                token = .punctuation(b, offset: i)
                i += 1
            default:
                token = .other(offset: i)
                i += 1
            }
            if !body(token) { return }
        }
    }

    /// The deepest nesting of arrays and objects in the JSON text `data`, counted without parsing
    /// (`forEachToken`). Used to refuse absurdly nested input before `JSONSerialization`
    /// recurses into it.
    public static func nestingDepth(_ data: Data) -> Int {
        var depth = 0, deepest = 0
        forEachToken([UInt8](data)) { t in
            guard case .punctuation(let b, _) = t else { return true }
            if b == UInt8(ascii: "[") || b == UInt8(ascii: "{") { depth += 1; deepest = max(deepest, depth) }
            if b == UInt8(ascii: "]") || b == UInt8(ascii: "}") { depth -= 1 }
            return true
        }
        return deepest
    }

    /// The byte offset of the first trailing comma in the JSON text `data` (a `,` followed by
    /// nothing but whitespace up to a `]` or `}`), outside strings, and that closing byte; nil when
    /// there is none. RFC 8259 (sections 4 and 5) allows no such comma; Foundation's
    /// `JSONSerialization` on Linux accepts it, so `parse` refuses it with this scan
    /// (`forEachToken`). Offsets count from the first byte of `data`.
    public static func trailingComma(_ data: Data) -> (offset: Int, closer: UInt8)? {
        var comma: Int?
        var found: (offset: Int, closer: UInt8)?
        forEachToken([UInt8](data)) { t in
            switch t {
            case .punctuation(UInt8(ascii: ","), let offset): comma = offset
            case .punctuation(let b, _) where b == UInt8(ascii: "]") || b == UInt8(ascii: "}"):
                if let c = comma { found = (c, b); return false }
            default: comma = nil
            }
            return true
        }
        return found
    }

    /// The first key that appears twice in one object of the JSON text `data`, as first
    /// written (`first`) and again (`key`), with the byte offset of its second appearance (from
    /// the first byte of `data`); nil when the keys of every object differ. Keys are compared as
    /// the parsed object compares them (Swift's `String` equality): escapes undone (`"a"` and
    /// `"\u0061"` are one key) and Unicode canonical equivalents equal (`"\u00e9"` and
    /// `"e\u0301"`, é precomposed and decomposed, are one key: the object keeps one of them),
    /// each key's text decoded by `JSONSerialization` as a fragment. RFC 8259 section 4: the
    /// names within an object should be unique, and what a reader makes of repeated ones "is
    /// unpredictable" (Foundation keeps the last). Call on text `JSONSerialization` has read:
    /// a key is a string (`forEachToken`) after `{` or after a `,` within an object. O(n) in
    /// the bytes.
    public static func repeatedKey(_ data: Data) -> (key: String, first: String, offset: Int)? {
        let bytes = [UInt8](data)
        var open: [[String: String]?] = [] // per open container: its keys so far, as first written; nil for an array
        var expectKey = false
        var found: (key: String, first: String, offset: Int)?
        forEachToken(bytes) { t in
            switch t {
            case .string(let start, let end):
                if expectKey, var keys = open.last ?? nil,
                   let key = (try? JSONSerialization.jsonObject(with: Data(bytes[start..<end]), options: [.fragmentsAllowed])) as? String {
                    if let first = keys[key] { found = (key, first, start); return false }
                    keys[key] = key
                    open[open.count - 1] = keys
                }
                expectKey = false
            case .punctuation(let b, _):
                switch b {
                case UInt8(ascii: "{"): open.append([:]); expectKey = true
                case UInt8(ascii: "["): open.append(nil); expectKey = false
                case UInt8(ascii: "}"), UInt8(ascii: "]"): _ = open.popLast(); expectKey = false
                case UInt8(ascii: ","): expectKey = (open.last ?? nil) != nil
                default: expectKey = false
                }
            case .other: break
            }
            return true
        }
        return found
    }

    /// The byte offset of the first `\\uXXXX` escape in a string of the JSON text `data` that
    /// names a lone UTF-16 surrogate (a high one, D800-DBFF, not followed by an escaped low one,
    /// DC00-DFFF, or a low one alone), with its four hex digits; nil when there is none. RFC 8259
    /// section 8.2: such a string names no Unicode text; `JSONSerialization` refuses it without a
    /// position ("Unexpected end of file during string parse"), so `parse` finds it with this
    /// scan of each string's escapes (strings from `forEachToken`).
    public static func loneSurrogate(_ data: Data) -> (offset: Int, digits: String)? {
        let bytes = [UInt8](data)
        func unit(at i: Int, before end: Int) -> UInt32? {
            guard i + 6 <= end, bytes[i] == UInt8(ascii: "\\"), bytes[i + 1] == UInt8(ascii: "u") else { return nil }
            return UInt32(String(decoding: bytes[(i + 2)...(i + 5)], as: UTF8.self), radix: 16)
        }
        var found: (offset: Int, digits: String)?
        forEachToken(bytes) { t in
            guard case .string(let start, let end) = t else { return true }
            var i = start + 1
            while i < end {
                guard bytes[i] == UInt8(ascii: "\\") else { i += 1; continue }
                guard let u = unit(at: i, before: end) else { i += 2; continue } // another escape: two bytes
                let digits = String(decoding: bytes[(i + 2)...(i + 5)], as: UTF8.self)
                if (0xDC00...0xDFFF).contains(u) { found = (i, digits); return false }
                if (0xD800...0xDBFF).contains(u) {
                    guard let low = unit(at: i + 6, before: end), (0xDC00...0xDFFF).contains(low) else { found = (i, digits); return false }
                    i += 12
                    continue
                }
                i += 6
            }
            return true
        }
        return found
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

    /// The deepest nesting a JSON document we read may have.
    public static let maxDepth = 64

    /// Parses `data` as a JSON document with `JSONSerialization`, refusing nesting deeper than
    /// `maxDepth` and a trailing comma (RFC 8259 allows none; `JSONSerialization` on Linux
    /// accepts one). Throws `JSONDocumentError` with a message fit for a status file, naming the
    /// line and column of the fault (e.g. `not valid JSON: Invalid value at line 3, column 12`,
    /// `not valid JSON: trailing comma at line 4, column 9 (before ']')`). With `uniqueKeys` (a
    /// document people write, such as a request: not a style, whose readers take repeated keys),
    /// a key repeated in one object is refused too (`repeatedKey`): `ambiguous JSON: the key
    /// 'maxZoom' appears twice in one object, at line 3, column 3`.
    public static func parse(_ data: Data, maxDepth: Int = JSONKind.maxDepth, uniqueKeys: Bool = false) throws(JSONDocumentError) -> Any {
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
            // Foundation names a lone surrogate without a position (and as an end of file).
            if let d = detail, d.contains("surrogate") || d.contains("no high character"), let lone = loneSurrogate(text) {
                let (line, column) = position(ofByte: lone.offset, in: text)
                throw JSONDocumentError(message: "not valid JSON: a lone UTF-16 surrogate \\u\(lone.digits) at line \(line), column \(column) (it names no character)")
            }
            // Foundation's words for a number past a double's range name the language, not the
            // limit: "Number 1e400 is not representable in Swift."
            if let d = detail, d.hasPrefix("Number "), d.hasSuffix(" is not representable in Swift.") {
                let literal = d.dropFirst("Number ".count).dropLast(" is not representable in Swift.".count)
                throw JSONDocumentError(message: "not JSON TileSpool can read: the number \(TerminalText.inline(String(literal.prefix(40)))) is beyond a 64-bit float's range (about ±1.8e308; RFC 8259 section 6 lets a reader set that limit)")
            }
            throw JSONDocumentError(message: "not valid JSON" + (detail.map { ": " + withLineAndColumn($0, in: text) } ?? ""))
        }
        if let comma = trailingComma(text) {
            let (line, column) = position(ofByte: comma.offset, in: text)
            throw JSONDocumentError(message: "not valid JSON: trailing comma at line \(line), column \(column) (before '\(Character(Unicode.Scalar(comma.closer)))')")
        }
        if uniqueKeys, let repeated = repeatedKey(text) {
            let (line, column) = position(ofByte: repeated.offset, in: text)
            // Two spellings Unicode counts as one text: each shown as its code points.
            func points(_ s: String) -> String { s.unicodeScalars.map { String(format: "U+%04X", $0.value) }.joined(separator: " ") }
            let spelling = Array(repeated.first.unicodeScalars) == Array(repeated.key.unicodeScalars) ? ""
                : " (as \(points(repeated.first)) and as \(points(repeated.key)), one text in Unicode)"
            throw JSONDocumentError(message: "ambiguous JSON: the key '\(TerminalText.inline(repeated.key))' appears twice in one object\(spelling), at line \(line), column \(column)")
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

/// A JSON value of any shape, for the parts of a status that carry a document verbatim: the
/// request as read (`request`, `context`), an export's entry, the area. Numbers keep whether they
/// were integers (`int`) or not (`double`), so `14` stays `14` and `7.5` stays `7.5`; one that
/// neither holds exactly (an integer beyond 64 bits, 18446744073709551615) is a `decimal`, kept
/// digit for digit as `JSONSerialization` read it.
public enum JSONValue: Sendable, Equatable, Codable {
    case null
    case bool(Bool)
    case int(Int)
    case double(Double)
    case decimal(Decimal)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    /// The value of a `JSONSerialization` result or of a dictionary built for it (`NSNull`,
    /// `Bool`, `Int`, `Double`, `NSNumber`, `String`, arrays, `[String: Any]`). Anything else
    /// (never produced by either) becomes its description as a string.
    public init(_ any: Any) {
        switch any {
        case is NSNull: self = .null
        case let v as JSONValue: self = v
        case let s as String: self = .string(s)
        // Numbers JSONSerialization holds exactly only as decimals (beyond 64 bits).
        case let d as NSDecimalNumber: self = Int(d.stringValue).map { .int($0) } ?? .decimal(d.decimalValue)
        case let a as [Any]: self = .array(a.map(JSONValue.init))
        case let o as [String: Any]: self = .object(o.mapValues(JSONValue.init))
        default:
            if type(of: any) == Bool.self, let b = any as? Bool { self = .bool(b); return }
            if type(of: any) == Int.self, let i = any as? Int { self = .int(i); return }
            if type(of: any) == Double.self, let d = any as? Double { self = .double(d); return }
            if let n = any as? NSNumber {
                if JSONKind.isBool(n) { self = .bool(n.boolValue); return }
                let t = String(cString: n.objCType)
                if t == "d" || t == "f" { self = .double(n.doubleValue); return }
                // An unsigned 64-bit integer above Int.max would wrap as an Int.
                if t == "Q", n.uint64Value > UInt64(Int.max), let d = Decimal(string: n.stringValue) { self = .decimal(d); return }
                self = .int(n.intValue)
                return
            }
            if let i = any as? Int { self = .int(i); return }
            if let d = any as? Double { self = .double(d); return }
            self = .string(String(describing: any))
        }
    }

    /// The value as `JSONSerialization` would give it (`NSNull`, `Bool`, `Int`, `Double`,
    /// `String`, `[Any]`, `[String: Any]`), for code that still reads documents that way.
    public var any: Any {
        switch self {
        case .null: return NSNull()
        case .bool(let b): return b
        case .int(let i): return i
        case .double(let d): return d
        case .decimal(let d): return NSDecimalNumber(decimal: d)
        case .string(let s): return s
        case .array(let a): return a.map(\.any)
        case .object(let o): return o.mapValues(\.any)
        }
    }

    /// The object's members; nil when the value is not an object.
    public var object: [String: JSONValue]? { if case .object(let o) = self { return o } else { return nil } }
    /// The string; nil when the value is not a string.
    public var string: String? { if case .string(let s) = self { return s } else { return nil } }

    public init(from decoder: Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() { self = .null }
        else if let b = try? c.decode(Bool.self) { self = .bool(b) }
        else if let i = try? c.decode(Int.self) { self = .int(i) }
        else if let d = try? c.decode(Double.self) {
            // A number a Double does not hold exactly (more digits than it keeps) stays a decimal.
            if let dec = try? c.decode(Decimal.self), Decimal(string: "\(d)") != dec { self = .decimal(dec) } else { self = .double(d) }
        }
        else if let s = try? c.decode(String.self) { self = .string(s) }
        else if let a = try? c.decode([JSONValue].self) { self = .array(a) }
        else { self = .object(try c.decode([String: JSONValue].self)) }
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.singleValueContainer()
        switch self {
        case .null: try c.encodeNil()
        case .bool(let b): try c.encode(b)
        case .int(let i): try c.encode(i)
        case .double(let d): try c.encode(d)
        case .decimal(let d): try c.encode(d)
        case .string(let s): try c.encode(s)
        case .array(let a): try c.encode(a)
        case .object(let o): try c.encode(o)
        }
    }
}
