# An NDEF TLV whose 3-byte length (400) claims more than the tag's 144-byte data area.
03 FF 01 90 D1 01 04 54 02 65 6E FE
