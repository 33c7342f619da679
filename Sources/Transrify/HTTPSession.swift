import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The one URLSession every Transrify request and evidence upload goes through.
///
/// Not `URLSession.shared`: its URL cache is asked about every request, and on Linux that
/// question runs on libdispatch's background-QoS pool, which starts a thread named
/// `com.apple.root.background-qos` for a few seconds after each burst of requests. After a
/// duress sign-in (an alert, presigns, uploads) the daemon showed that thread in `ps -eL`
/// and after a normal one it did not (found by `lab/stealth-check`). An API client has
/// nothing to cache anyway, nor cookies or credentials to keep.
public enum HTTPSession {
    public static let shared: URLSession = {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.httpCookieStorage = nil
        configuration.httpShouldSetCookies = false
        configuration.urlCredentialStorage = nil
        return URLSession(configuration: configuration)
    }()
}
