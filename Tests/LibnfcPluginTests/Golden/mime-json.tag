# A MIME record (TNF 2) of type application/json holding {"a":1}.
03 1A D2 10 07 61 70 70 6C 69 63 61 74 69 6F 6E 2F 6A 73 6F 6E 7B 22 61 22 3A 31 7D FE
