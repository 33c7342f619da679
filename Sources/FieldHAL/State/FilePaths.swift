/// Paths as text, for the core and the modules above it: the core cannot lean on
/// swift-system's `FilePath`, and NSString's path methods are Foundation's, not its essentials'.
public enum FilePaths {
    /// The directory holding the file at `path` (a configuration's, whose relative paths are
    /// taken from it; an atomic write's, where its temporary file goes): "." for a bare name,
    /// "/" for a file at the root. Trailing and doubled slashes are dropped, as NSString's
    /// `deletingLastPathComponent` drops them.
    public static func directory(of path: String) -> String {
        var path = Substring(path)
        while path.count > 1, path.hasSuffix("/") { path.removeLast() }
        guard let slash = path.lastIndex(of: "/") else { return "." }
        if slash == path.startIndex { return "/" }
        var directory = path[..<slash]
        while directory.count > 1, directory.hasSuffix("/") { directory.removeLast() }
        return String(directory)
    }
}
