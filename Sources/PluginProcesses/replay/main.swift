import FieldHAL
import FieldHALPluginSDK
import ReplayPlugin

// The replay backend as a plugin process of its own: `fieldhal plugin serve replay` runs this.
await PluginProcess.main(ReplayPlugin.descriptor, version: FieldHALVersion.current)
