# A formatted tag with no message yet: an empty NDEF TLV.
03 00 FE
