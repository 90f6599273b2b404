@testable import FleetQueue
import Testing

/// The graph as a value: names, references and cycles checked without a database.
@Suite struct JobGraphTests {
    func node(_ name: String, after: [String] = [], ids: [Int64] = []) -> JobGraph.Node {
        var job = NewJob(kind: .drillNoop)
        job.after = ids
        return JobGraph.Node(name: name, job: job, runsAfter: after)
    }

    func refusal(_ nodes: [JobGraph.Node], key: String? = nil) -> String? {
        do {
            _ = try JobGraph(nodes, idempotencyKey: key)
            return nil
        } catch {
            return "\(error)"
        }
    }

    @Test func aDiamondIsLaidOutInLayersEachAfterTheOnesItNames() throws {
        let graph = try JobGraph([node("d", after: ["b", "c"]), node("b", after: ["a"]), node("a"), node("c", after: ["a"])], idempotencyKey: "k")
        #expect(graph.layers == [[2], [1, 3], [0]])
        #expect(graph.localDependencies == [[1, 3], [2], [], [2]])
        #expect(graph.nodes.map(\.job.idempotencyKey) == ["k/d", "k/b", "k/a", "k/c"])
    }

    @Test func cyclesUnknownNamesDuplicatesAndOversizedGraphsAreRefused() {
        #expect(refusal([node("a", after: ["b"]), node("b", after: ["c"]), node("c", after: ["a"]), node("d")])?
            .contains("the jobs 'a', 'b', 'c' run after one another in a cycle") == true)
        #expect(refusal([node("a", after: ["a"])])?.contains("cycle") == true)
        #expect(refusal([node("a", after: ["ghost"])])?.contains("runs after 'ghost', which the graph does not name") == true)
        #expect(refusal([node("a"), node("a")])?.contains("two jobs are named 'a'") == true)
        #expect(refusal([node("")])?.contains("name must be 1 to 64 bytes") == true)
        #expect(refusal([])?.contains("must have 1 to 1000 jobs") == true)
        #expect(refusal((0...1000).map { node("n\($0)") })?.contains("not 1001") == true)
        let wide = (0..<60).map { node("n\($0)") } + [node("sink", after: (0..<60).map { "n\($0)" }, ids: Array(1...41))]
        #expect(refusal(wide)?.contains("runs after more than 100 jobs") == true)
        var keyed = node("a")
        keyed.job.idempotencyKey = "own"
        #expect(refusal([keyed])?.contains("take none of their own") == true)
    }
}
