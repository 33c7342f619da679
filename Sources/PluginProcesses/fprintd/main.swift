import FieldHAL
import FieldHALPluginSDK
import FprintdPlugin

// The fprintd backend as a plugin process of its own: `fieldhal plugin serve fprintd` runs this.
await PluginProcess.main(FprintdPlugin.descriptor, version: FieldHALVersion.current)
