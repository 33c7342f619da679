import FieldHAL
import FieldHALPluginSDK
import EvdevPlugin

// The evdev backend as a plugin process of its own: `fieldhal plugin serve evdev` runs this.
await PluginProcess.main(EvdevPlugin.descriptor, version: FieldHALVersion.current)
