import Testing
@testable import FieldHAL

@Suite struct TerminalTextTests {
    @Test(arguments: [
        ("plain text, café ✓", false, "plain text, café ✓"),
        ("id-1234\u{1B}[2J", false, #"id-1234\u001b[2J"#),
        ("ref\nfieldhal stopped", false, #"ref\u000afieldhal stopped"#),
        ("two\nlines\u{7}", true, "two\nlines\\u0007"),
        ("\u{0}\u{7F}\u{85}\u{9B}31m\tx", false, #"\u0000\u007f\u0085\u009b31m"# + "\tx"),
    ])
    func controlCharactersAreShownNotSent(text: String, keepingNewlines: Bool, shown: String) {
        #expect(TerminalText.escaped(text, keepingNewlines: keepingNewlines) == shown)
    }
}
