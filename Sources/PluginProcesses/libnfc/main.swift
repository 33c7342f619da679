import FieldHAL
import FieldHALPluginSDK
import LibnfcPlugin

// The libnfc backend as a plugin process of its own: `fieldhal plugin serve libnfc` runs this.
await PluginProcess.main(LibnfcPlugin.descriptor, version: FieldHALVersion.current)
