import FieldHAL
