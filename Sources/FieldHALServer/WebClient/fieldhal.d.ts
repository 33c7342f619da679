// Types of fieldhal.js, FieldHAL's hardware API for a page (api/openapi.yaml has every field).

export type Scope = "alerts" | "biometrics" | "camera" | "evidence" | "haptics" | "location" | "lock" | "microphone"
  | "nfc.emulate" | "nfc.read" | "nfc.write" | "speaker" | "status" | "transrify";
export type EventType = "fix" | "capability" | "alert" | "lock" | "tag" | "use";

export interface Caller { scopes: Scope[]; token?: string; origin?: string; devices?: string[]; uid?: number; gid?: number; pid?: number; user?: string }
export interface Status { version: string; api: "v1"; pid: number; startedAt: string; configuration: string; caller: Caller }
export interface CapabilityStatus { capability: string; state: "available" | "unavailable" | "notConfigured"; plugin?: string; device?: string; reason?: string; [field: string]: unknown }
export interface Fix { latitude: number; longitude: number; altitude?: number; horizontalAccuracy?: number; verticalAccuracy?: number; speed?: number; course?: number; mode: string; satellitesUsed?: number; time: string; device?: string }
export interface LocationReading { fix: Fix; age: number; source: string }
export interface NDEFRecord { kind: string; value: string; language?: string; tnf: number; recordType: string; payload: string; id?: string }
export interface Tag { type: string; uid: string; atqa?: string; sak?: string; records: NDEFRecord[]; exchanges?: { command: string; response?: string }[] }
export interface TagEvent { state: "found" | "lost"; tag: Tag; device: string }
export interface RecordInput { text?: string; language?: string; uri?: string }
export interface HapticsPlayed { pattern: string; steps: number; milliseconds: number }
export interface SoundPlayed { sound: string; milliseconds: number }
export interface EventGap { lastEventId: string; missed?: number; reason: string }
export interface StreamEvent { type: EventType; id?: string; data: any }

export interface ProblemInit { kind: string; subject?: string; detail?: string; advice?: string; status?: number }
export class FieldHALError extends Error {
  constructor(problem: ProblemInit);
  kind: string; subject: string; detail: string; advice?: string; status: number;
}

export interface EventStream { close(): Promise<void>; readonly lastEventId?: string }

export class FieldHAL {
  constructor(options: { url?: string; token: string; fetch?: typeof fetch });
  status(): Promise<Status>;
  capabilities(): Promise<{ capabilities: CapabilityStatus[] }>;
  devices(): Promise<{ devices: CapabilityStatus[] }>;
  location(options?: { timeoutMs?: number; maxAgeMs?: number; accuracyM?: number; device?: string }): Promise<LocationReading>;
  readTag(options?: { timeoutMs?: number; device?: string }): Promise<Tag>;
  writeTag(records: RecordInput[], options?: { timeoutMs?: number; device?: string }): Promise<Tag>;
  emulateTag(records: RecordInput[], options?: { timeoutMs?: number; device?: string }): Promise<{ outcome: string; [field: string]: unknown }>;
  playHaptics(pattern: string, options?: { device?: string }): Promise<HapticsPlayed>;
  playSound(sound?: string, options?: { device?: string }): Promise<SoundPlayed>;
  biometrics(options?: { device?: string }): Promise<{ availability: string; [field: string]: unknown }>;
  verifyFinger(options?: { timeoutMs?: number; device?: string }): Promise<{ result: string; [field: string]: unknown }>;
  lock(): Promise<{ configured: boolean; locked: boolean; [field: string]: unknown }>;
  unlock(options: { pin?: string; fingerprint?: boolean; scanTimeoutMs?: number }): Promise<{ outcome: string; [field: string]: unknown }>;
  photo(options?: { width?: number; height?: number; quality?: number; device?: string }): Promise<Blob>;
  previewURL(options?: { width?: number; height?: number; fps?: number; quality?: number; device?: string }): string;
  events(options?: {
    types?: EventType[]; devices?: string[];
    onEvent?: (event: StreamEvent) => void; onGap?: (gap: EventGap) => void;
    onError?: (error: FieldHALError) => void; onOpen?: () => void;
  }): EventStream;
}
