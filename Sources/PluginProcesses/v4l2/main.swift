import FieldHAL
import FieldHALPluginSDK
import V4L2Plugin

// The v4l2 backend as a plugin process of its own: `fieldhal plugin serve v4l2` runs this.
await PluginProcess.main(V4L2Plugin.descriptor, version: FieldHALVersion.current)
