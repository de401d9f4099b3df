// What answers a user action in events.jsonl (`tilespool pause|resume|cancel|delete|refresh ID
// --wait`): the daemon writes one line per state change, ignored action and delete
// (docs/contract.md, "events.jsonl"); this reads them, one at a time, as values.
import Foundation

/// How the daemon answered an action, read from its `events.jsonl` lines.
public enum ActionOutcome: Sendable, Equatable {
    /// The action took effect: the region's new state (`deleted` for a delete), or for a refresh
    /// `refresh finished` with its counts.
    case applied(String)
    /// A refresh started (state `queued`, refreshing): its end is still to come.
    case started
    /// The action does not apply in the region's state (`ignored` in the event): why, and the
    /// unchanged state.
    case ignored(why: String, state: String)
    /// The action was applied but did not end as asked: a refresh failed (with its error) or was
    /// cancelled, or the region was deleted while the action waited.
    case failed(String)
}

/// Follows the events of one region after one action was dropped and tells which event answers
/// it. Feed it every event line written after the control file was dropped, in order; events of
/// other regions and state changes that do not answer the action (a download finishing meanwhile)
/// give nil. The rules follow `Daemon.apply` and the refresh functions:
///
/// - any action: an event with `action` equal to it and an `ignored` reason is `ignored`;
///   state `deleted` is `applied("deleted")` for a delete, `failed` for any other action;
/// - `pause`, `resume`, `cancel`: the state change whose `note` is the action (`resume: retrying
///   N failed tiles` for the resume of a region completed with failed tiles) is `applied`;
///   `cancel` during a refresh ends with `refresh: cancelled`, also `applied`;
/// - `refresh`: `refresh: started` with note `refresh` is `started`; after it, `refresh:
///   finished` is `applied`, `failed` or `cancelled` is `failed`; a `refresh: failed` with note
///   `refresh` (the refresh could not start) is `failed`.
public struct ActionWatch: Sendable {
    /// The region the action was dropped for.
    public let id: String
    /// The action dropped (`control/<id>.<action>`).
    public let action: RegionAction
    /// A refresh this watch asked for has started (its `finished` is the answer).
    public private(set) var refreshStarted = false

    /// A watch for `action` on region `id`, made before its control file is dropped.
    public init(id: String, action: RegionAction) { self.id = id; self.action = action }

    /// The outcome `event` (one line of events.jsonl) gives, or nil when it does not answer the action.
    public mutating func answer(_ event: StatusEvent) -> ActionOutcome? {
        guard event.id == id else { return nil }
        let state = event.state, note = event.note, refresh = event.refresh
        if event.action == action.rawValue, let why = event.ignored {
            return .ignored(why: why, state: state)
        }
        if state == "deleted" { return action == .delete ? .applied("deleted") : .failed("the region was deleted") }
        switch action {
        case .delete:
            return nil
        case .pause, .cancel:
            if note == action.rawValue { return .applied(state) }
            if action == .cancel && refresh == "cancelled" { return .applied("\(state) (refresh cancelled)") }
            return nil
        case .resume:
            guard note == "resume" || note?.hasPrefix("resume:") == true else { return nil }
            if refresh == "failed" { return .failed("the retry of its failed tiles could not start: \(Self.error(event))") }
            return .applied(refresh == "started" ? "\(state) (refreshing its failed tiles)" : state)
        case .refresh:
            if !refreshStarted {
                guard note == "refresh" else { return nil }
                if refresh == "started" { refreshStarted = true; return .started }
                if refresh == "failed" { return .failed("refresh failed: \(Self.error(event))") }
                return nil
            }
            switch refresh {
            case "finished"?:
                return .applied("refresh finished: \(event.resourcesChecked ?? 0) checked, \(event.resourcesChanged ?? 0) changed, \(event.resourcesUnchanged ?? 0) unchanged")
            case "failed"?: return .failed("refresh failed: \(Self.error(event))")
            case "cancelled"?: return .failed("refresh cancelled")
            default: return nil
            }
        }
    }

    /// `CODE: message` of an event's `error` object, or `unknown error`.
    static func error(_ event: StatusEvent) -> String {
        guard let e = event.error else { return "unknown error" }
        return "\(e.code.rawValue): \(e.message)"
    }
}
