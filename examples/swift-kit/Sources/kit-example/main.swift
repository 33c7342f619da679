import FieldHAL
import FieldHALPlugins
import Foundation

// kit-example [CONFIG]: loads the kit CONFIG names (default: the fake kit beside this
// package) in this process, prints how each capability loaded, then gets a fix and reads
// a tag. Exit 0 when both came, 69 when the kit could not give them, 78 for a bad file.

let path = CommandLine.arguments.dropFirst().first ?? "../fake-kit.toml"
let registry = BuiltinPlugins.registry
let configuration: KitConfiguration
do {
    configuration = try KitConfiguration.load(path: path, registry: registry)
} catch {
    FileHandle.standardError.write(Data("kit-example: \(error)\n".utf8))
    exit(78)
}
let kit = await Kit.load(configuration, registry: registry,
                         context: PluginContext(configDirectory: configuration.directory, stateDirectory: NSTemporaryDirectory()))
for status in kit.statuses {
    print("\(status.capability.rawValue): \(status.state.rawValue)" + (status.reason.map { " (\($0))" } ?? ""))
}
do {
    let reading = try await kit.location().currentFix(FixRequest(timeout: .seconds(5)))
    let fix = reading.fix
    print("fix: \(fix.latitude ?? .nan), \(fix.longitude ?? .nan) ±\(fix.horizontalAccuracy ?? .nan) m (\(reading.source))")
    let tag = try await kit.nfcReader().readTag(timeout: .seconds(5))
    let records = (tag.ndef?.records ?? []).map { record in
        switch try? record.content() {
        case .text(let text, _)?: "text \"\(text)\""
        case .uri(let uri)?: "uri \(uri)"
        default: "a record of \(record.payload.count) bytes"
        }
    }
    print("tag: \(tag.type.rawValue) \(tag.uidString)" + (records.isEmpty ? "" : ", " + records.joined(separator: ", ")))
    await kit.close()
} catch {
    FileHandle.standardError.write(Data("kit-example: \(error)\n".utf8))
    await kit.close()
    exit(69)
}
