# The empty NDEF message the NFC Forum writes for "nothing": one empty record, D0 00 00.
03 03 D0 00 00 FE
