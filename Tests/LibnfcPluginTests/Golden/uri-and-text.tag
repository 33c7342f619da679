# Two records: a URI (prefix 04 "https://") then a Text in German; a Lock Control TLV and a
# NULL TLV before the NDEF TLV, as NTAG213s from the factory carry them.
01 03 A0 0C 34   # Lock Control TLV
00               # NULL TLV
03 21
91 01 0C 55 04 65 78 61 6D 70 6C 65 2E 6F 72 67       # URI record (MB), https://example.org
51 01 0D 54 02 64 65 47 75 74 65 6E 20 54 61 67 21    # Text record (ME), "Guten Tag!"
FE
