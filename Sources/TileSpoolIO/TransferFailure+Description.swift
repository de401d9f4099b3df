// How a failed transfer reads in a message (`tilespool plan`'s "cannot fetch URL: ..."): a short
// kind and libcurl's or our reason, never Swift's enum dump. Kept out of HTTPClient.swift.
import TileSpoolCore

extension TransferFailure: CustomStringConvertible {
    /// `network error: <why>`, `bad response: <why>`, `refused: <why>` or `policyRefused: <why>`, where `<why>` is the
    /// reason the transfer recorded (libcurl's error text for a network failure, e.g. "Couldn't
    /// connect to server").
    public var description: String {
        switch self {
        case .network(let why): return "network error: \(why)"
        case .badResponse(let why): return "bad response: \(why)"
        case .refused(let why): return "refused: \(why)"
        case .policyRefused(let why): return "policyRefused: \(why)"
        }
    }
}
