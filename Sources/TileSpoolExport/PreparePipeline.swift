// Exports read objects, check them against their names and prepare them (gzip) on other threads
// while the caller's thread writes the file (issue 30): batches of objects go to workers, each
// batch read in pack order by one worker, and come back to the caller in the order submitted.
import Foundation
import TileSpoolIO

/// Objects that one worker of `PreparePipeline` reads together from `store`, in pack order
/// (`TileStore.readObjects`: by pack, then offset; objects the index does not place after), and
/// turns into values with `prepare` (called with an object's index in `sha256s` and its bytes,
/// which hash to its name).
struct ObjectBatch<T: Sendable>: Sendable {
    let store: any TileStore
    let sha256s: [String]
    /// The objects' `objectLocations` when the caller has them (one per name), else nil.
    let locations: [ObjectLocation?]?
    let prepare: @Sendable (Int, Data) throws -> T
}

/// A pipeline of `ObjectBatch`es: `submit` hands a batch to one of `workers` threads and, while
/// `ahead` batches are submitted and not yet taken, first takes the oldest: its `body` gets the
/// batch's values (in the batch's order of names) and its tag on the caller's thread, in the
/// order the batches were submitted. So reading, hashing and gzip of later batches overlap the caller's
/// writing of earlier ones, with at most `ahead` batches of bodies in memory; threads meet once
/// per batch, not once per object. `finish` takes the rest; `stop` (always called, in a
/// `defer`) makes the workers give up and returns once every thread has ended.
///
/// Errors reach the caller at the batch that had them, in order: what `prepare` throws, as it
/// is; an object that cannot be read, as `RegionPack.StoreReadFailure`; what `body` throws.
final class PreparePipeline<T: Sendable, Tag>: @unchecked Sendable {
    private let condition = NSCondition()
    /// Submitted batches no worker has taken yet, with their numbers (oldest first).
    private var waiting: [(Int, ObjectBatch<T>)] = []
    private var waitingHead = 0
    /// Finished batches not yet taken by the caller, by number.
    private var results: [Int: Result<[T], Error>] = [:]
    private var stopping = false
    private var running = 0
    /// Caller's thread only: the tags of submitted batches not yet taken, and the counts.
    private var tags: [Tag] = []
    private var tagsHead = 0
    private var submitted = 0, taken = 0
    private let ahead: Int

    /// Starts `workers` threads (at least one).
    init(workers: Int, ahead: Int) {
        self.ahead = max(1, ahead)
        let n = max(1, workers)
        running = n
        for _ in 0..<n { Thread.detachNewThread { [self] in work() } }
    }

    /// Hands `batch` to the workers, first taking the oldest batches (calling `body`) while
    /// `ahead` are under way.
    /// - Throws: what the batches taken or `body` throw.
    func submit(_ batch: ObjectBatch<T>, tag: Tag, _ body: (Tag, [T]) throws -> Void) throws {
        while submitted - taken >= ahead { try takeOldest(body) }
        condition.lock()
        waiting.append((submitted, batch))
        condition.signal()
        condition.unlock()
        tags.append(tag)
        submitted += 1
    }

    /// Takes every batch submitted, in order.
    /// - Throws: as `submit`.
    func finish(_ body: (Tag, [T]) throws -> Void) throws {
        while taken < submitted { try takeOldest(body) }
    }

    /// Makes the workers stop (between objects) and waits until every one has ended.
    func stop() {
        condition.lock()
        stopping = true
        condition.broadcast()
        while running > 0 { condition.wait() }
        condition.unlock()
    }

    private func takeOldest(_ body: (Tag, [T]) throws -> Void) throws {
        condition.lock()
        while results[taken] == nil { condition.wait() }
        let result = results.removeValue(forKey: taken)!
        condition.unlock()
        let tag = tags[tagsHead]
        tagsHead += 1
        if tagsHead >= 64 && tagsHead * 2 > tags.count { tags.removeFirst(tagsHead); tagsHead = 0 }
        taken += 1
        switch result {
        case .success(let values): try body(tag, values)
        case .failure(let error as PrepareFailure): throw error.error
        case .failure(let error): throw RegionPack.StoreReadFailure(error: error)
        }
    }

    /// What `prepare` threw, told apart from the store's read errors.
    private struct PrepareFailure: Error { var error: Error }
    /// A worker gives up: the pipeline is stopping.
    private struct Stopped: Error {}

    private var isStopping: Bool {
        condition.lock(); defer { condition.unlock() }
        return stopping
    }

    private func work() {
        while true {
            condition.lock()
            while waitingHead == waiting.count && !stopping { condition.wait() }
            if stopping {
                running -= 1
                condition.broadcast()
                condition.unlock()
                return
            }
            let (number, batch) = waiting[waitingHead]
            waitingHead += 1
            if waitingHead == waiting.count { waiting.removeAll(keepingCapacity: true); waitingHead = 0 }
            condition.unlock()
            var values = [T?](repeating: nil, count: batch.sha256s.count)
            let result: Result<[T], Error>
            do {
                try batch.store.readObjects(batch.sha256s, at: batch.locations, limit: 1 << 30) { k, data in
                    if isStopping { throw Stopped() }
                    do { values[k] = try batch.prepare(k, data) } catch { throw PrepareFailure(error: error) }
                }
                let all = values.compactMap { $0 }
                precondition(all.count == values.count, "readObjects handed on every object or threw")
                result = .success(all)
            } catch {
                result = .failure(error)
            }
            condition.lock()
            results[number] = result
            condition.broadcast()
            condition.unlock()
        }
    }
}
