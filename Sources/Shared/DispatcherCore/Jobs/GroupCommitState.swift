/// Which enqueues share a commit (`EnqueueBatcher`), decided without I/O. A request that finds
/// fewer than `maxInFlight` commits running goes at once, alone: an idle dispatcher adds no
/// delay. Requests that arrive while every slot commits wait, and the first commit to end takes
/// them (at most `maxBatch`) into its slot's next statement. No timer: the batches are exactly
/// the requests that arrived during a commit.
struct GroupCommitState<Item> {
    let maxBatch: Int
    let maxInFlight: Int
    /// Arrived while every slot was committing, in arrival order.
    private(set) var waiting: [Item] = []
    /// Slots committing a batch now.
    private(set) var inFlight = 0

    init(maxBatch: Int, maxInFlight: Int) {
        precondition(maxBatch >= 1 && maxInFlight >= 1)
        self.maxBatch = maxBatch
        self.maxInFlight = maxInFlight
    }

    /// A request arrives: the batch to commit at once in a new slot (the request alone), or nil
    /// when it waits for a slot's commit to end.
    mutating func arrive(_ item: Item) -> [Item]? {
        guard inFlight < maxInFlight else {
            waiting.append(item)
            return nil
        }
        inFlight += 1
        return [item]
    }

    /// A slot's commit ended: the next batch the same slot commits, or nil when nothing waits
    /// (the slot is free again).
    mutating func commitEnded() -> [Item]? {
        precondition(inFlight > 0, "a commit ended that never started")
        guard !waiting.isEmpty else {
            inFlight -= 1
            return nil
        }
        let count = min(maxBatch, waiting.count)
        defer { waiting.removeFirst(count) }
        return Array(waiting.prefix(count))
    }
}
