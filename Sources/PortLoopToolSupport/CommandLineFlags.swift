// The command-line walk shared by portloop-demo and portloop-echod: each parses its own flags and values,
// this only splits `--flag=value` and hands out a flag's value.

/// Walks command-line arguments of the forms `--flag value` and `--flag=value`.
public struct CommandLineFlags {
    /// A flag given without the value it needs, or with one it does not take.
    public enum Problem: Error, Equatable, CustomStringConvertible {
        case missingValue(flag: String)
        case unexpectedValue(flag: String)

        public var description: String {
            switch self {
            case let .missingValue(flag): "\(flag) needs a value"
            case let .unexpectedValue(flag): "\(flag) takes no value"
            }
        }
    }

    private var rest: ArraySlice<String>
    private var inlineValue: String?
    /// The current argument as given.
    public private(set) var argument = ""
    /// The current argument up to an `=`, if it is a `--` flag with one; the whole argument otherwise.
    public private(set) var flag = ""

    /// Starts before the first of `arguments` (those after the program name).
    public init(_ arguments: [String]) { rest = arguments[...] }

    /// Moves to the next argument; false when there is none.
    public mutating func next() -> Bool {
        guard let next = rest.popFirst() else { return false }
        argument = next
        if next.hasPrefix("--"), let equals = next.firstIndex(of: "=") {
            flag = String(next[..<equals])
            inlineValue = String(next[next.index(after: equals)...])
        } else {
            flag = next
            inlineValue = nil
        }
        return true
    }

    /// The current flag's value: what follows its `=`, or else the next argument (consumed).
    public mutating func value() throws(Problem) -> String {
        if let inlineValue { return inlineValue }
        guard let next = rest.popFirst() else { throw .missingValue(flag: flag) }
        return next
    }

    /// Checks that the current flag, which takes no value, was not given one with `=`.
    public func expectNoValue() throws(Problem) {
        if inlineValue != nil { throw .unexpectedValue(flag: flag) }
    }
}
