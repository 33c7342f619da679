import FieldHAL
import FieldHALPluginSDK
import GpsdPlugin

// The gpsd backend as a plugin process of its own: `fieldhal plugin serve gpsd` runs this.
await PluginProcess.main(GpsdPlugin.descriptor, version: FieldHALVersion.current)
