/// The little the API's caller gate reads of a request head before the HTTP decoder does:
/// where the head ends, and its request line, to answer a refused caller with the refusal
/// its route would give. Outside input from any local user, so fuzzed (`request-head`).
public enum RequestHead {
    /// Where "\r\n\r\n" ends, if the bytes hold it.
    public static func end(in bytes: [UInt8]) -> Int? {
        guard bytes.count >= 4 else { return nil }
        for index in 3..<bytes.count where bytes[index] == 0x0A && bytes[index - 1] == 0x0D && bytes[index - 2] == 0x0A && bytes[index - 3] == 0x0D {
            return index + 1
        }
        return nil
    }

    /// The request line's method and path, query left out ("GET /v1/status"), or nil when
    /// the first line is not `METHOD TARGET HTTP/…` with an upper-case method and a
    /// printable target. At most 512 bytes of it are read.
    public static func requestLine(in bytes: [UInt8]) -> String? {
        let line = bytes.prefix { $0 != 0x0D && $0 != 0x0A }.prefix(512)
        let parts = line.split(separator: 0x20, omittingEmptySubsequences: false)
        guard parts.count == 3, parts[2].starts(with: Array("HTTP/".utf8)),
              !parts[0].isEmpty, parts[0].allSatisfy({ $0 >= 0x41 && $0 <= 0x5A }),
              !parts[1].isEmpty, parts[1].allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { return nil }
        let target = parts[1].prefix { $0 != 0x3F }  // up to a '?'
        return String(decoding: parts[0], as: UTF8.self) + " " + String(decoding: target, as: UTF8.self)
    }
}
