# An NDEF Text record, "en", as a phone writes it: NDEF TLV (03, length), the record, terminator.
03 15 D1 01 11 54 02 65 6E 74 72 66 3A 64 75 72 65 73 73 3A 74 61 67 FE
