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

    /// Parses `data` as a JSON document with `JSONSerialization`, refusing nesting deeper than
    /// `maxDepth`. Throws `JSONDocumentError` with a message fit for a status file.
    public static func parse(_ data: Data, maxDepth: Int = 64) throws(JSONDocumentError) -> Any {
        if data.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }) {
            throw JSONDocumentError(message: "empty")  // read as "the request is empty", "the style is empty"
        }
        let depth = nestingDepth(data)
        if depth > maxDepth {
            throw JSONDocumentError(message: "JSON nested \(depth) levels deep (at most \(maxDepth))")
        }
        do {
            return try JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed])
        } catch {
            let detail = (error as NSError).userInfo[NSDebugDescriptionErrorKey] as? String
            throw JSONDocumentError(message: "not valid JSON" + (detail.map { ": \($0)" } ?? ""))
        }
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
