// swift-tools-version:6.1
// A program that uses a kit in-process, with FieldHAL as a library: the core and the
// built-in plugins' registry (every backend whose library is installed, by default traits).
import PackageDescription

let package = Package(
    name: "KitExample",
    platforms: [.macOS(.v15)],
    dependencies: [.package(name: "FieldHAL", path: "../..")],
    targets: [
        .executableTarget(
            name: "kit-example",
            dependencies: [.product(name: "FieldHAL", package: "FieldHAL"), .product(name: "FieldHALPlugins", package: "FieldHAL")],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
    ]
)
