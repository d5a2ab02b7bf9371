import Foundation
import Testing

/// PortLoop's public names must not clash with Foundation's or NIOCore's: a user imports them beside PortLoop
/// and must never have to qualify a name. The benchmarks package compiles a file naming every public type
/// unqualified beside those imports (Benchmarks/Sources/portloop-bench/NameClashCheck.swift); this test keeps
/// that file's list complete.
@Suite("Public names")
struct NameClashListTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    @Test("every top-level public type is in the name-clash check")
    func checkListIsComplete() throws {
        let sources = Self.root.appendingPathComponent("Sources/PortLoop")
        let check = try String(contentsOf: Self.root.appendingPathComponent(
            "Benchmarks/Sources/portloop-bench/NameClashCheck.swift"), encoding: .utf8)
        let declaration = try Regex(#"^public (?:final )?(?:class|struct|enum|actor|protocol) ([A-Za-z_]+)"#)
            .anchorsMatchLineEndings()
        var names = Set<String>()
        let files = FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil)!
        for case let file as URL in files where file.pathExtension == "swift" {
            let text = try String(contentsOf: file, encoding: .utf8)
            for match in text.matches(of: declaration) { names.insert(String(match.output[1].substring!)) }
        }
        #expect(names.count > 20, "found \(names.sorted())")
        let missing = names.filter { !check.contains("\($0).self") && !check.contains("\($0)<") }
        #expect(missing.isEmpty, "add to NameClashCheck.swift: \(missing.sorted())")
    }
}
