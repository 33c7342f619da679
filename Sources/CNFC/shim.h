#pragma once
#include <nfc/nfc.h>
#include <string.h>

// libnfc's target structs are packed unions holding fixed arrays; Swift sees them as
// tuples at unaligned offsets. These helpers keep that layout on the C side: Swift passes
// and receives plain byte buffers.

/// The first reader libnfc finds (honouring LIBNFC_DEVICE and libnfc.conf), or 0.
static inline size_t fieldhal_nfc_first_device(nfc_context *context, char *out, size_t capacity) {
    nfc_connstring found[1];
    size_t count = nfc_list_devices(context, found, 1);
    if (count == 0 || capacity == 0) return 0;
    strncpy(out, found[0], capacity - 1);
    out[capacity - 1] = 0;
    return count;
}

/// The `index`th connection string nfc_list_devices finds (up to 16), for `fieldhal detect`.
static inline size_t fieldhal_nfc_device_at(nfc_context *context, size_t index, char *out, size_t capacity) {
    nfc_connstring found[16];
    size_t count = nfc_list_devices(context, found, 16);
    if (index >= count || capacity == 0) return count;
    strncpy(out, found[index], capacity - 1);
    out[capacity - 1] = 0;
    return count;
}

/// One ISO 14443-A target as selected: UID, ATQA, SAK, ATS.
typedef struct {
    uint8_t uid[10];
    size_t uid_length;
    uint8_t atqa[2];
    uint8_t sak;
    uint8_t ats[254];
    size_t ats_length;
} fieldhal_nfc_iso14443a;

/// Selects one ISO 14443-A target at 106 kbps. Returns libnfc's result: 1 found, 0 none,
/// < 0 an error.
static inline int fieldhal_nfc_select_iso14443a(nfc_device *device, fieldhal_nfc_iso14443a *out) {
    nfc_modulation modulation = { .nmt = NMT_ISO14443A, .nbr = NBR_106 };
    nfc_target target;
    memset(&target, 0, sizeof target);
    int result = nfc_initiator_select_passive_target(device, modulation, NULL, 0, &target);
    if (result <= 0) return result;
    const nfc_iso14443a_info *info = &target.nti.nai;
    out->uid_length = info->szUidLen > sizeof out->uid ? sizeof out->uid : info->szUidLen;
    memcpy(out->uid, info->abtUid, out->uid_length);
    memcpy(out->atqa, info->abtAtqa, 2);
    out->sak = info->btSak;
    out->ats_length = info->szAtsLen > sizeof out->ats ? sizeof out->ats : info->szAtsLen;
    memcpy(out->ats, info->abtAts, out->ats_length);
    return result;
}

/// Puts the chip in target mode as an ISO 14443-4 (ISO-DEP) card with a 4-byte UID
/// 08 uid[0..2] (the PN532 hard-wires the first byte), ATQA 00 04, SAK 0x20: what an NFC
/// Forum Type 4 tag looks like to a reader. Returns the bytes the reader sent on
/// activation (RATS) or < 0.
static inline int fieldhal_nfc_target_init_type4(nfc_device *device, const uint8_t uid[3],
                                                 uint8_t *received, size_t capacity, int timeout) {
    nfc_target target;
    memset(&target, 0, sizeof target);
    target.nm.nmt = NMT_ISO14443A;
    target.nm.nbr = NBR_106;
    target.nti.nai.abtAtqa[0] = 0x00;
    target.nti.nai.abtAtqa[1] = 0x04;
    target.nti.nai.abtUid[0] = 0x08;
    memcpy(target.nti.nai.abtUid + 1, uid, 3);
    target.nti.nai.szUidLen = 4;
    target.nti.nai.btSak = 0x20;
    // T0 TA TB TC: the PN532 builds its own ATS; libnfc takes historical bytes from here.
    const uint8_t ats[] = { 0x75, 0x33, 0x92, 0x03 };
    memcpy(target.nti.nai.abtAts, ats, sizeof ats);
    target.nti.nai.szAtsLen = sizeof ats;
    return nfc_target_init(device, &target, received, capacity, timeout);
}
