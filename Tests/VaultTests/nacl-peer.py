#!/usr/bin/python3
"""The other side of a sealed-box exchange, in PyNaCl (Debian's python3-nacl).

  nacl-peer.py keypair              prints: <secret key b64> <public key b64>
  nacl-peer.py seal PUBKEY JSON     prints the base64 sealed box of JSON for PUBKEY
  nacl-peer.py open SECRET PAYLOAD  prints the plaintext of a base64 sealed box
"""
import base64
import sys

from nacl.public import PrivateKey, PublicKey, SealedBox

command = sys.argv[1]
if command == "keypair":
    key = PrivateKey.generate()
    print(base64.b64encode(bytes(key)).decode(), base64.b64encode(bytes(key.public_key)).decode())
elif command == "seal":
    box = SealedBox(PublicKey(base64.b64decode(sys.argv[2])))
    print(base64.b64encode(box.encrypt(sys.argv[3].encode())).decode())
elif command == "open":
    box = SealedBox(PrivateKey(base64.b64decode(sys.argv[2])))
    print(box.decrypt(base64.b64decode(sys.argv[3])).decode())
else:
    sys.exit("unknown command " + command)
