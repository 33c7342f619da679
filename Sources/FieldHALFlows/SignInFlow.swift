import FieldHAL
import Foundation
import Transrify

/// Why a sign-in did not sign in, with the message the seed prescribes (Requirements 2, 4, 5).
public struct SignInFailure: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        case invalidInput
        /// Verdict FAIL.
        case invalidCredentials
        case api(TransrifyError.Kind)
        case storage
    }

    public var kind: Kind
    /// What the person at the device sees, word for word.
    public var message: String
    /// What a technician needs (never printed at the device by default).
    public var detail: String

    public var description: String { message }
}

/// Duress sign-in (seed 000, Requirements 2–5, 9, 10, 16, 17): validate, locate, ask the
/// Transrify API for a verdict, keep the session in the vault.
///
/// NORMAL and DURESS take exactly the same steps here and return the same value: the
/// verdict decides only the sealed `limitedMode` flag. What DURESS sets in motion (the
/// silent alert, evidence) runs afterwards in `AfterSignIn`, started the same way for both.
public struct SignInFlow: Sendable {
    public var client: TransrifyClient
    public var location: (any LocationProvider)?
    public var sessions: SessionStore
    public var device: DeviceInfo
    /// Req 10.4: live location for up to 5 s, then a cached fix, then none.
    public var locationRequest = FixRequest.flows

    public init(client: TransrifyClient, location: (any LocationProvider)?, sessions: SessionStore, device: DeviceInfo) {
        self.client = client
        self.location = location
        self.sessions = sessions
        self.device = device
    }

    /// Req 2.1: alphanumeric, 3–50 characters.
    public static func isValidCustomerRef(_ reference: String) -> Bool {
        (3...50).contains(reference.count) && reference.unicodeScalars.allSatisfy { $0.isASCII && CharacterSet.alphanumerics.contains($0) }
    }

    /// Req 2.2: 4–8 digits.
    public static func isValidPIN(_ pin: String) -> Bool {
        (4...8).contains(pin.count) && pin.utf8.allSatisfy { (0x30...0x39).contains($0) }
    }

    public func signIn(customerRef: String, pin: String) async throws -> SessionRecord {
        guard Self.isValidCustomerRef(customerRef) else {
            throw SignInFailure(kind: .invalidInput, message: "Enter a customer reference of 3 to 50 letters or digits.", detail: "invalid reference")
        }
        guard Self.isValidPIN(pin) else {
            throw SignInFailure(kind: .invalidInput, message: "Enter a PIN of 4 to 8 digits.", detail: "invalid PIN format")
        }
        let geo = await location?.geolocation(locationRequest)
        let response: LoginResponse
        do {
            response = try await client.login(customerRef: customerRef, pin: pin, device: device, geo: geo)
        } catch let error as TransrifyError {
            throw SignInFailure(kind: .api(error.kind), message: Self.message(for: error), detail: error.detail)
        }
        switch response.verdict {
        case .fail:
            throw SignInFailure(kind: .invalidCredentials, message: "Invalid credentials. Please try again.", detail: "verdict FAIL")
        case .normal, .duress:
            guard let sessionId = response.sessionId, let token = response.token ?? response.sessionId else {
                throw SignInFailure(kind: .api(.malformedResponse), message: "Something went wrong. Please try again.",
                                    detail: "verdict \(response.verdict.rawValue) without a session id")
            }
            let record = SessionRecord(customerRef: customerRef, sessionId: sessionId, token: token,
                                       limitedMode: response.verdict == .duress, geo: geo)
            do {
                try sessions.save(record)
            } catch {
                throw SignInFailure(kind: .storage, message: "Something went wrong. Please try again.", detail: "\(error)")
            }
            return record
        }
    }

    /// The login screen's messages (Req 5); a 429 that outlasted its retries is the
    /// login's "Too many attempts" (Req 5.3) rather than the generic Req 22.5 text.
    static func message(for error: TransrifyError) -> String {
        if error.kind == .rateLimited { return "Too many attempts. Please wait a minute." }
        return error.userMessage
    }
}
