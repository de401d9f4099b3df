/// The state of a region, with the names the platform offline SDKs use. Written as the single word
/// in `spool/status/<id>.state` and as `state` in `<id>.json` (see docs/contract.md).
public enum RegionState: String, Sendable, Codable, CaseIterable {
    case queued, downloading, pausedUser, pausedNetwork, failedStorage, failed, completed, cancelled

    /// States the daemon does not leave by itself (only a user's action moves them on).
    public var isTerminal: Bool { self == .completed || self == .failed || self == .cancelled }

    /// States in which a restarted daemon picks the download up again.
    public var resumesOnRestart: Bool { self == .queued || self == .downloading }
}

/// What a user asks for with `spool/control/<id>.<action>` or `tilespool <action> ID`.
public enum RegionAction: String, Sendable, CaseIterable {
    case pause, resume, cancel, delete
    /// Re-check every resource of a completed region with conditional requests; the pack in use
    /// stays as it is until the refreshed one replaces it (docs/refresh.md).
    case refresh
}

/// Things that happen to a region while the daemon works on it.
public enum RegionEvent: Sendable, Equatable {
    /// A download slot became free for a queued region.
    case start
    /// Every planned resource is in the manifest.
    case finish
    /// The server stopped answering and retries ran out.
    case networkLost
    /// A probe reached the server again: the region queues and downloads again as soon as a slot is free.
    case networkBack
    /// A store write failed for lack of space or a broken disk.
    case storageFailed
    /// A permanent error (HTTP status, bad style, tile limit).
    case fail
}

/// The outcome of applying an action or event to a state.
public enum Transition: Sendable, Equatable {
    /// The region moves to this state.
    case to(RegionState)
    /// The region and its files are removed (reported as state `deleted` in events.jsonl).
    case delete
    /// The action does not apply in this state; nothing changes. The string says why.
    case ignored(String)
    /// A refresh of the completed pack starts (`refresh` on a completed region): the region is
    /// `queued` with a refresh under way, its pack untouched until the refresh completes.
    case beginRefresh
    /// The refresh under way has every resource: its manifest replaces the pack's in one rename
    /// and the region is `completed` (docs/refresh.md, "The swap").
    case swapRefresh
    /// The refresh under way ends without a swap (a failure, a cancel, the network lost): its
    /// files are dropped and the region is `completed` with the pack as it was.
    case abandonRefresh
}

/// The region state machine: pure functions from (state, action or event) to a transition.
/// The table is documented in docs/contract.md ("States and actions").
///
/// A refresh is a phase of its own (`refreshing`): a completed region goes `queued`,
/// `downloading` and maybe `pausedUser` again with its previous pack intact, and leaves the
/// phase by `swapRefresh` or `abandonRefresh`, never losing that pack: whatever would fail, cancel
/// or pause a download for the network instead abandons the refresh.
public enum RegionStateMachine {
    /// The transition a user action causes; `refreshing`: a refresh of the region is under way.
    public static func apply(_ action: RegionAction, to state: RegionState, refreshing: Bool = false) -> Transition {
        if refreshing {
            switch (action, state) {
            case (.cancel, .queued), (.cancel, .downloading), (.cancel, .pausedUser): return .abandonRefresh
            case (.refresh, _): return .ignored("a refresh of this region is already under way")
            default: break
            }
        }
        switch (action, state) {
        case (.refresh, .completed): return .beginRefresh
        case (.refresh, _): return .ignored("refresh applies to completed regions, not \(state.rawValue)")
        case (.delete, _): return .delete
        case (.pause, .queued), (.pause, .downloading): return .to(.pausedUser)
        case (.pause, _): return .ignored("pause applies to queued or downloading regions, not \(state.rawValue)")
        case (.resume, .pausedUser), (.resume, .pausedNetwork), (.resume, .failedStorage),
             (.resume, .failed), (.resume, .cancelled): return .to(.queued)
        case (.resume, _): return .ignored("resume applies to paused, failed or cancelled regions, not \(state.rawValue)")
        case (.cancel, let s) where !s.isTerminal: return .to(.cancelled)
        case (.cancel, _): return .ignored("cancel applies to regions that are not finished, not \(state.rawValue)")
        }
    }

    /// The transition an event from the downloader causes; `refreshing`: a refresh of the region
    /// is under way.
    public static func apply(_ event: RegionEvent, to state: RegionState, refreshing: Bool = false) -> Transition {
        if refreshing {
            switch (event, state) {
            case (.networkLost, .downloading), (.storageFailed, .downloading), (.fail, .downloading), (.fail, .queued):
                return .abandonRefresh
            case (.finish, .downloading): return .swapRefresh
            default: break
            }
        }
        switch (event, state) {
        case (.start, .queued): return .to(.downloading)
        case (.finish, .downloading): return .to(.completed)
        case (.networkLost, .downloading): return .to(.pausedNetwork)
        case (.networkBack, .pausedNetwork): return .to(.queued)
        case (.storageFailed, .downloading): return .to(.failedStorage)
        case (.fail, .downloading), (.fail, .queued): return .to(.failed)
        default: return .ignored("\(event) does not apply to \(state.rawValue)")
        }
    }
}

/// Download progress, with MapLibre's `OfflineRegionStatus` field names (resources counted, bytes
/// after HTTP content decoding).
public struct RegionProgress: Sendable, Equatable, Codable {
    public var resourcesCompleted = 0
    public var resourcesExpected = 0
    /// True once every TileJSON is resolved: `resourcesExpected` is exact and will not change.
    public var resourcesExpectedIsPrecise = false
    /// Bytes of every completed resource (empty tiles count 0).
    public var bytesCompleted = 0
    public var tilesCompleted = 0
    public var tilesExpected = 0
    /// Bytes of completed tiles.
    public var tileBytesCompleted = 0
    /// The exact bytes of the planned tiles, known before any tile is fetched when every tile
    /// source is a PMTiles archive (issue 31: the sum of the directory's lengths, as the archive
    /// holds them, before a gzip tile compression is undone); nil (absent from the status) otherwise.
    public var tileBytesExpected: Int?
    /// Sprites and glyph ranges the server answered 404 (recorded, not fatal).
    public var resourcesMissing = 0
    /// During and after a refresh (docs/refresh.md): resources asked about again and answered,
    /// and of those, the ones with a new body and the ones unchanged (304, or the same bytes).
    /// Resources kept unasked because of `--max-age` count as completed but not checked.
    public var resourcesChecked = 0
    public var resourcesChanged = 0
    public var resourcesUnchanged = 0
    /// Tiles recorded as failed within the request's `maxFailedTiles` (counted in
    /// `resourcesCompleted` and `tilesCompleted` too, like empty tiles).
    public var tilesFailed = 0
    /// Completed tiles that are empty (an empty status, 404 or 204 by default, or an empty body;
    /// counted in `tilesCompleted` too).
    public var tilesEmpty = 0
    public init() {}

    /// Counts one manifest line as completed: resources, bytes, tiles, tile bytes, and the empty,
    /// failed and missing among them (docs/contract.md, progress). The one place that says how a
    /// line counts; the progress of a pack is this over its manifest's distinct lines.
    public mutating func count(_ line: ManifestLine) {
        resourcesCompleted += 1
        bytesCompleted = SaturatingCount.add(bytesCompleted, line.bytes) // saturates, never traps
        if line.kind == .tile {
            tilesCompleted += 1
            tileBytesCompleted = SaturatingCount.add(tileBytesCompleted, line.bytes)
            if line.sha256 == nil && !line.failed { tilesEmpty += 1 }
        }
        if line.kind != .tile && line.sha256 == nil { resourcesMissing += 1 }
        if line.failed { tilesFailed += 1 }
    }

    /// The completed counts of `lines` (each counted by `count`) in place of this value's, the
    /// expected counts and refresh tallies kept.
    public func recounted(_ lines: [ManifestLine]) -> RegionProgress {
        var p = RegionProgress()
        p.resourcesExpected = resourcesExpected
        p.resourcesExpectedIsPrecise = resourcesExpectedIsPrecise
        p.tilesExpected = tilesExpected
        p.tileBytesExpected = tileBytesExpected
        p.resourcesChecked = resourcesChecked
        p.resourcesChanged = resourcesChanged
        p.resourcesUnchanged = resourcesUnchanged
        for l in lines { p.count(l) }
        return p
    }

    /// Counts one refreshed resource in `resourcesChecked`, `resourcesChanged`, `resourcesUnchanged`.
    public mutating func tally(_ outcome: RefreshOutcome) {
        switch outcome {
        case .kept: break
        case .unchanged: resourcesChecked += 1; resourcesUnchanged += 1
        case .changed: resourcesChecked += 1; resourcesChanged += 1
        }
    }

    /// The keys of `progress` in the status, as the fields are named (docs/contract.md).
    private enum CodingKeys: String, CodingKey {
        case resourcesCompleted, resourcesExpected, resourcesExpectedIsPrecise, bytesCompleted, tilesCompleted, tilesExpected,
             tileBytesCompleted, tileBytesExpected, resourcesMissing, resourcesChecked, resourcesChanged, resourcesUnchanged,
             tilesFailed, tilesEmpty
    }

    /// Reads back a `progress` object: missing fields (a status written before they existed) are
    /// 0, `false`, or nil for `tileBytesExpected`. Written with every field, `tileBytesExpected`
    /// only when known (the synthesized `encode(to:)`).
    /// - Throws: `DecodingError.dataCorrupted` for a count that is there but is not a whole
    ///   number from 0 to 2^63-1 (`-5`, `1.5`, `9e99`, `"7"`): no writer makes one, and `status`
    ///   printed `resources -5/10` from a file damaged by hand; the status is then unreadable.
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        /// The count at `k`, nil when absent or null.
        func count(_ k: CodingKeys) throws -> Int? {
            guard c.contains(k), !((try? c.decodeNil(forKey: k)) ?? false) else { return nil }
            guard let n = try? c.decode(Int.self, forKey: k), n >= 0 else {
                throw DecodingError.dataCorruptedError(forKey: k, in: c, debugDescription: "\(k.rawValue) is not a count")
            }
            return n
        }
        func i(_ k: CodingKeys) throws -> Int { try count(k) ?? 0 }
        resourcesCompleted = try i(.resourcesCompleted); resourcesExpected = try i(.resourcesExpected)
        resourcesExpectedIsPrecise = ((try? c.decodeIfPresent(Bool.self, forKey: .resourcesExpectedIsPrecise)) ?? nil) ?? false
        bytesCompleted = try i(.bytesCompleted); tilesCompleted = try i(.tilesCompleted)
        tilesExpected = try i(.tilesExpected); tileBytesCompleted = try i(.tileBytesCompleted)
        resourcesMissing = try i(.resourcesMissing)
        resourcesChecked = try i(.resourcesChecked); resourcesChanged = try i(.resourcesChanged)
        resourcesUnchanged = try i(.resourcesUnchanged)
        tilesFailed = try i(.tilesFailed)
        tilesEmpty = try i(.tilesEmpty)
        tileBytesExpected = try count(.tileBytesExpected)
    }
}
