import FieldHAL
import FieldHALPluginSDK
import ALSAPlugin

// The alsa backend as a plugin process of its own: `fieldhal plugin serve alsa` runs this.
await PluginProcess.main(ALSAPlugin.descriptor, version: FieldHALVersion.current)
