// The wire values are part of this module's interface: whoever imports Transrify uses them.
@_exported import TransrifyWire
