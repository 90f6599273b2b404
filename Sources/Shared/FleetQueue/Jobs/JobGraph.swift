/// Jobs enqueued together that run after one another, named locally (`JobQueue.enqueue(_:)`,
/// the protocol's `jobs.enqueueGraph`). Checked when made: names unique, every local name known,
/// no cycle. Its layers are the order the driver inserts in: a node only after every node it
/// names, so each dependency exists when its dependent is inserted (a cycle could only arise
/// here; jobs named by id exist already, and so cannot run after the new one).
public struct JobGraph: Sendable {
    public struct Node: Sendable {
        /// Unique in the graph; other nodes name it in `runsAfter`.
        public var name: String
        /// `job.after`: existing jobs it also runs after. Its idempotency key is the graph's.
        public var job: NewJob
        /// Names of nodes of this graph it runs after.
        public var runsAfter: [String]

        public init(name: String, job: NewJob, runsAfter: [String] = []) {
            self.name = name
            self.job = job
            self.runsAfter = runsAfter
        }
    }

    public static let maxNodes = 1_000
    public static let maxNameBytes = 64

    public let nodes: [Node]
    /// Per node, the indexes of the nodes it runs after.
    let localDependencies: [[Int]]
    /// Node indexes, layer by layer: every node's local dependencies are in earlier layers.
    let layers: [[Int]]

    /// `idempotencyKey`: the whole graph's; each node's job gets `<key>/<name>`, so enqueueing the
    /// graph again answers the jobs of the first time.
    public init(_ nodes: [Node], idempotencyKey: String? = nil) throws(QueueError) {
        guard (1...Self.maxNodes).contains(nodes.count) else { throw .invalidGraph("must have 1 to \(Self.maxNodes) jobs, not \(nodes.count)") }
        var indexOfName: [String: Int] = [:]
        for (index, node) in nodes.enumerated() {
            guard !node.name.isEmpty, node.name.utf8.count <= Self.maxNameBytes, !node.name.utf8.contains(0) else {
                throw .invalidGraph("job \(index + 1): name must be 1 to \(Self.maxNameBytes) bytes")
            }
            guard indexOfName.updateValue(index, forKey: node.name) == nil else { throw .invalidGraph("two jobs are named '\(node.name)'") }
            guard node.job.idempotencyKey == nil else {
                throw .invalidGraph("job '\(node.name)': the graph's idempotency key covers its jobs; they take none of their own")
            }
        }
        var localDependencies: [[Int]] = []
        for node in nodes {
            var seen: Set<Int> = []
            for name in node.runsAfter {
                guard let index = indexOfName[name] else { throw .invalidGraph("job '\(node.name)' runs after '\(name)', which the graph does not name") }
                seen.insert(index)
            }
            guard Set(node.job.after).count + seen.count <= NewJob.maxDependencies else {
                throw .invalidGraph("job '\(node.name)' runs after more than \(NewJob.maxDependencies) jobs")
            }
            localDependencies.append(seen.sorted())
        }
        self.localDependencies = localDependencies
        layers = try Self.layers(localDependencies, names: nodes.map(\.name))
        self.nodes = nodes.map { node in
            var node = node
            node.job.idempotencyKey = idempotencyKey.map { "\($0)/\(node.name)" }
            return node
        }
    }

    /// Kahn's algorithm: each layer holds the nodes whose dependencies are all in earlier ones;
    /// nodes left over lie on a cycle.
    private static func layers(_ dependencies: [[Int]], names: [String]) throws(QueueError) -> [[Int]] {
        var remaining = dependencies.map(\.count)
        var dependents = Array(repeating: [Int](), count: dependencies.count)
        for (node, nodeDependencies) in dependencies.enumerated() {
            for dependency in nodeDependencies { dependents[dependency].append(node) }
        }
        var layers: [[Int]] = []
        var layer = remaining.indices.filter { remaining[$0] == 0 }
        var placed = 0
        while !layer.isEmpty {
            layers.append(layer)
            placed += layer.count
            var next: [Int] = []
            for node in layer {
                for dependent in dependents[node] {
                    remaining[dependent] -= 1
                    if remaining[dependent] == 0 { next.append(dependent) }
                }
            }
            layer = next.sorted()
        }
        guard placed == dependencies.count else {
            let cycle = remaining.indices.filter { remaining[$0] > 0 }.map { "'\(names[$0])'" }.prefix(10)
            throw .invalidGraph("the jobs \(cycle.joined(separator: ", ")) run after one another in a cycle")
        }
        return layers
    }
}
