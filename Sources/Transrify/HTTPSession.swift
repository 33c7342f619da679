import Foundation
import Synchronization
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The one URLSession every Transrify request and evidence upload goes through, and the two
/// exchanges made on it: a request with a body in memory, an upload streamed from a file.
///
/// Not `URLSession.shared`: its URL cache is asked about every request, and on Linux that
/// question runs on libdispatch's background-QoS pool, which starts a thread named
/// `com.apple.root.background-qos` for a few seconds after each burst of requests. After a
/// duress sign-in (an alert, presigns, uploads) the daemon showed that thread in `ps -eL`
/// and after a normal one it did not (found by `lab/stealth-check`). An API client has
/// nothing to cache anyway, nor cookies or credentials to keep.
///
/// Every exchange is driven by the session's delegate, so that:
/// - a redirect is followed only within the request's origin (scheme, host, port): a 307
///   re-sends the body, and the body is a PIN, the tenant key or evidence;
/// - an answer's body is counted as it arrives and the exchange is given up past its limit:
///   a hostile server cannot make the kit hold more than the limit in memory.
public enum HTTPSession {
    /// Why an exchange ended without an answer to use.
    public enum Failure: Error, Sendable, CustomStringConvertible {
        /// The answer's body passed `limit` bytes (declared or received).
        case tooLarge(limit: Int)
        /// The server redirected to another origin; nothing was sent there.
        case crossOriginRedirect(to: String)
        /// No HTTP answer: DNS, refused, reset, timed out.
        case transport(String)

        public var description: String {
            switch self {
            case .tooLarge(let limit): "the answer's body is larger than \(limit) bytes"
            case .crossOriginRedirect(let to): "redirected to another origin (\(to)); not followed"
            case .transport(let why): why
            }
        }
    }

    public static let shared: URLSession = {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.httpCookieStorage = nil
        configuration.httpShouldSetCookies = false
        configuration.urlCredentialStorage = nil
        let queue = OperationQueue()
        queue.name = "fieldhal-http"
        queue.maxConcurrentOperationCount = 1
        return URLSession(configuration: configuration, delegate: exchanges, delegateQueue: queue)
    }()

    private static let exchanges = Exchanges()

    /// Sends `request` and returns the answer, its body at most `limit` bytes.
    public static func data(for request: URLRequest, limit: Int) async throws -> (Data, HTTPURLResponse) {
        try await exchange(limit: limit) { shared.dataTask(with: request) }
    }

    /// Sends `request` with the file's bytes as its body (streamed, never all in memory) and
    /// returns the answer, its body at most `limit` bytes.
    public static func upload(for request: URLRequest, fromFile file: URL, limit: Int) async throws -> (Data, HTTPURLResponse) {
        try await exchange(limit: limit) { shared.uploadTask(with: request, fromFile: file) }
    }

    private static func exchange(limit: Int, _ makeTask: () -> URLSessionTask) async throws -> (Data, HTTPURLResponse) {
        let task = makeTask()
        return try await withCheckedThrowingContinuation { continuation in
            exchanges.begin(task, limit: limit, continuation: continuation)
            task.resume()
        }
    }

    /// The state of each exchange under way, by task identifier.
    private final class Exchanges: NSObject, URLSessionDataDelegate, @unchecked Sendable {
        private struct Exchange {
            var limit: Int
            var body = Data()
            var failure: Failure?
            var continuation: CheckedContinuation<(Data, HTTPURLResponse), any Error>
        }

        private let underWay = Mutex<[Int: Exchange]>([:])

        func begin(_ task: URLSessionTask, limit: Int, continuation: CheckedContinuation<(Data, HTTPURLResponse), any Error>) {
            underWay.withLock { $0[task.taskIdentifier] = Exchange(limit: limit, continuation: continuation) }
        }

        /// Gives the exchange up with `failure`; the task's completion then reports it.
        private func giveUp(_ task: URLSessionTask, _ failure: Failure) {
            underWay.withLock { $0[task.taskIdentifier]?.failure = failure; $0[task.taskIdentifier]?.body = Data() }
            task.cancel()
        }

        func urlSession(_ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
                        newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void) {
            let from = response.url ?? task.currentRequest?.url ?? task.originalRequest?.url
            if TransportPolicy.sameOrigin(from, request.url) {
                completionHandler(request)
            } else {
                underWay.withLock { $0[task.taskIdentifier]?.failure = .crossOriginRedirect(to: request.url?.absoluteString ?? "?") }
                completionHandler(nil)  // the 3xx itself becomes the answer, and is reported as refused
            }
        }

        func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
                        completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void) {
            let limit = underWay.withLock { $0[dataTask.taskIdentifier]?.limit } ?? 0
            if response.expectedContentLength > Int64(limit) {
                underWay.withLock { $0[dataTask.taskIdentifier]?.failure = .tooLarge(limit: limit) }
                completionHandler(.cancel)
                return
            }
            completionHandler(.allow)
        }

        func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
            let over = underWay.withLock { underWay -> Failure? in
                guard var exchange = underWay[dataTask.taskIdentifier], exchange.failure == nil else { return nil }
                guard exchange.body.count + data.count <= exchange.limit else { return .tooLarge(limit: exchange.limit) }
                exchange.body.append(data)
                underWay[dataTask.taskIdentifier] = exchange
                return nil
            }
            if let over { giveUp(dataTask, over) }
        }

        func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
            guard let exchange = underWay.withLock({ $0.removeValue(forKey: task.taskIdentifier) }) else { return }
            if let failure = exchange.failure {
                exchange.continuation.resume(throwing: failure)
            } else if let error {
                exchange.continuation.resume(throwing: Failure.transport(error.localizedDescription))
            } else if let response = task.response as? HTTPURLResponse {
                exchange.continuation.resume(returning: (exchange.body, response))
            } else {
                exchange.continuation.resume(throwing: Failure.transport("not an HTTP response"))
            }
        }
    }
}
