import SystemPackage

/// A line for whoever reads this process's standard error (a plugin process's host logs it),
/// written whole or not at all: there is nowhere to report a failure to write it.
public enum StandardError {
    public static func write(_ line: String) {
        var text = line
        if !text.hasSuffix("\n") { text += "\n" }
        _ = try? text.utf8.withContiguousStorageIfAvailable { bytes in
            try FileDescriptor.standardError.writeAll(UnsafeRawBufferPointer(bytes))
        }
    }
}
