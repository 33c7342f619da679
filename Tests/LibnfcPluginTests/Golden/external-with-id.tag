# An NFC Forum external record with an id ("7"): TNF 4, IL set, type "example.com:t".
03 14 DC 0D 02 01 65 78 61 6D 70 6C 65 2E 63 6F 6D 3A 74 37 AB CD FE
