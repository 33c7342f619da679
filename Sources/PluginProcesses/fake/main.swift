import FieldHAL
import FieldHALPluginSDK
import FakePlugin

// The fake backend as a plugin process of its own: `fieldhal plugin serve fake` runs this.
await PluginProcess.main(FakePlugin.descriptor, version: FieldHALVersion.current)
