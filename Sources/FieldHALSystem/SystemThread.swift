import CThreadName
import FieldHAL
#if canImport(Glibc)
import Glibc
#endif

/// A detached POSIX thread running one closure, named as `ps -L` and /proc show it.
///
/// Why not Foundation's `Thread`: it is the only reason a plugin process would load the whole
/// of Foundation (ICU, CoreFoundation) rather than FoundationEssentials, which is most of
/// a Swift plugin's resident memory (docs/decisions.md, "Foundation's essentials").
public enum SystemThread {
    /// Starts `body` on a new detached thread called `name` (at most 15 bytes: longer names
    /// are cut, as the kernel keeps 16 with the terminator). Fails only when the system
    /// cannot make a thread (EAGAIN: out of memory or over the thread limit).
    public static func start(name: String, _ body: @escaping @Sendable () -> Void) throws(FieldHALError) {
        let box = Unmanaged.passRetained(Body(name: name, body: body))
        var thread = pthread_t()
        let status = pthread_create(&thread, nil, { argument in
            let body = Unmanaged<Body>.fromOpaque(argument!).takeRetainedValue()
            _ = fieldhal_thread_set_name(String(body.name.utf8.prefix(15)) ?? "fieldhal")
            body.body()
            return nil
        }, box.toOpaque())
        guard status == 0 else {
            box.release()
            throw SystemError.io("pthread_create", subject: name, code: status,
                                 advice: "the system is out of memory or over its thread limit; close other devices or programs")
        }
        pthread_detach(thread)
    }

    private final class Body {
        let name: String
        let body: @Sendable () -> Void
        init(name: String, body: @escaping @Sendable () -> Void) { self.name = name; self.body = body }
    }
}
