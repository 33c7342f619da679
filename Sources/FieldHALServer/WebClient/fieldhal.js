// FieldHAL's hardware API for a page in the kit's browser: one ES module, no dependencies.
// The web door serves it at /fieldhal.js; its types are at /fieldhal.d.ts. See docs/web.md.
//
//   import { FieldHAL } from "http://127.0.0.1:8480/fieldhal.js";
//   const kit = new FieldHAL({ url: "http://127.0.0.1:8480", token: "fhw_…" });
//   console.log((await kit.status()).caller.scopes);
//   const stream = kit.events({ types: ["tag"], onEvent: (event) => console.log(event.type, event.data) });
//   await kit.playHaptics("success");
//
// Every failure is a FieldHALError carrying the daemon's typed error (kind, subject, detail,
// advice, status), or kind "network" when the door did not answer.

/** The daemon's typed error, or a failure to reach it. */
export class FieldHALError extends Error {
  constructor({ kind, subject = "", detail = "", advice = undefined, status = 0 }) {
    super((subject ? `${subject}: ${detail}` : detail) + (advice ? ` — ${advice}` : ""));
    this.name = "FieldHALError";
    this.kind = kind;
    this.subject = subject;
    this.detail = detail;
    this.advice = advice;
    this.status = status;
  }
}

/** A client of one kit's web door. */
export class FieldHAL {
  /**
   * @param {{url?: string, token: string, fetch?: typeof fetch}} options
   */
  constructor({ url = "http://127.0.0.1:8480", token, fetch: fetchFunction = globalThis.fetch.bind(globalThis) } = {}) {
    if (!token) throw new FieldHALError({ kind: "invalidArgument", subject: "token", detail: "no token: issue one with fieldhal web token add" });
    this.url = url.replace(/\/+$/, "");
    this.token = token;
    this.fetch = fetchFunction;
  }

  status() { return this.#json("GET", "status"); }
  capabilities() { return this.#json("GET", "capabilities"); }
  devices() { return this.#json("GET", "devices"); }
  location({ timeoutMs, maxAgeMs, accuracyM, device } = {}) {
    return this.#json("GET", "location", { query: { timeout_ms: timeoutMs, max_age_ms: maxAgeMs, accuracy_m: accuracyM, device } });
  }
  readTag({ timeoutMs, device } = {}) { return this.#json("POST", "nfc/read", { query: { device }, body: { timeoutMs } }); }
  writeTag(records, { timeoutMs, device } = {}) { return this.#json("POST", "nfc/write", { query: { device }, body: { records, timeoutMs } }); }
  emulateTag(records, { timeoutMs, device } = {}) { return this.#json("POST", "nfc/emulate", { query: { device }, body: { records, timeoutMs } }); }
  playHaptics(pattern, { device } = {}) { return this.#json("POST", "haptics/play", { query: { device }, body: { pattern } }); }
  playSound(sound = "soft-alert", { device } = {}) { return this.#json("POST", "speaker/play", { query: { device }, body: { sound } }); }
  biometrics({ device } = {}) { return this.#json("GET", "biometrics", { query: { device } }); }
  verifyFinger({ timeoutMs, device } = {}) { return this.#json("POST", "biometrics/verify", { query: { device }, body: { timeoutMs } }); }
  lock() { return this.#json("GET", "lock"); }
  /** Unlocks with a PIN, or with the fingerprint sensor when `fingerprint` is true. */
  unlock({ pin, fingerprint, scanTimeoutMs } = {}) { return this.#json("POST", "lock/unlock", { body: { pin, fingerprint, scanTimeoutMs } }); }

  /** A still as a JPEG Blob. */
  async photo({ width, height, quality, device } = {}) {
    const response = await this.#send("GET", "camera/photo", { query: { width, height, quality, device } });
    return response.blob();
  }

  /**
   * The camera live, for an `<img src>`: Motion-JPEG from one capture shared by every
   * viewer. The token rides in the query (an image request cannot carry a header).
   */
  previewURL({ width, height, fps, quality, device } = {}) {
    const target = new URL(`${this.url}/v1/camera/preview`);
    for (const [name, value] of Object.entries({ width, height, fps, quality, device, access_token: this.token })) {
      if (value !== undefined) target.searchParams.set(name, String(value));
    }
    return target.toString();
  }

  /**
   * Follows the event stream: `onEvent({type, id, data})` for each event, `onGap(gap)` when
   * the daemon says events were lost while the page was away. The stream reconnects by
   * itself (1 s, then up to 30 s apart) and resumes from the last event's id. `close()`
   * ends it. A refusal (4xx) is not retried: it goes to `onError` and the stream ends.
   */
  events({ types, devices, onEvent = () => {}, onGap = () => {}, onError = () => {}, onOpen = () => {} } = {}) {
    const query = { types: types && types.join(","), device: devices };
    const controller = new AbortController();
    let lastEventId, delay = 1000, closed = false;
    const run = async () => {
      while (!closed) {
        try {
          const headers = lastEventId ? { "Last-Event-ID": lastEventId } : {};
          const response = await this.#send("GET", "events", { query, headers, signal: controller.signal });
          onOpen();
          delay = 1000;
          await readEvents(response.body, (event) => {
            if (event.id) lastEventId = event.id;
            if (event.type === "gap") onGap(event.data); else onEvent(event);
          });
        } catch (error) {
          if (closed) return;
          if (error instanceof FieldHALError && error.status >= 400 && error.status < 500) { onError(error); return; }
          onError(error instanceof FieldHALError ? error : new FieldHALError({ kind: "network", detail: String(error) }));
        }
        if (closed) return;
        await new Promise((resolve) => setTimeout(resolve, delay));
        delay = Math.min(delay * 2, 30000);
      }
    };
    const running = run();
    return { close() { closed = true; controller.abort(); return running; }, get lastEventId() { return lastEventId; } };
  }

  async #json(method, route, { query, body } = {}) {
    const response = await this.#send(method, route, { query, body });
    return response.json();
  }

  async #send(method, route, { query = {}, body, headers = {}, signal } = {}) {
    const target = new URL(`${this.url}/v1/${route}`);
    for (const [name, value] of Object.entries(query)) {
      for (const item of [].concat(value ?? [])) target.searchParams.append(name, String(item));
    }
    const init = { method, headers: { Authorization: `Bearer ${this.token}`, ...headers }, signal };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(withoutUndefined(body));
    }
    let response;
    try {
      response = await this.fetch(target, init);
    } catch (error) {
      if (signal && signal.aborted) throw error;
      throw new FieldHALError({ kind: "network", subject: `${method} /v1/${route}`, detail: `the web door did not answer (${error})`,
                                advice: "is the daemon running with [web] listen, and the page's origin allowed by the kiosk's browser policy?" });
    }
    if (!response.ok) {
      let problem;
      try { problem = (await response.json()).error; } catch { problem = undefined; }
      throw new FieldHALError(problem ?? { kind: "http", subject: `${method} /v1/${route}`, detail: `HTTP ${response.status}`, status: response.status });
    }
    return response;
  }
}

function withoutUndefined(object) {
  return Object.fromEntries(Object.entries(object).filter(([, value]) => value !== undefined));
}

/** Server-Sent Events from a fetch body: each event's type, id and parsed data. */
async function readEvents(body, deliver) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let pending = "", type, id, data = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    pending += value;
    let newline;
    while ((newline = pending.indexOf("\n")) >= 0) {
      const line = pending.slice(0, newline).replace(/\r$/, "");
      pending = pending.slice(newline + 1);
      if (line === "") {
        if (type !== undefined) deliver({ type, id, data: JSON.parse(data.join("\n")) });
        type = undefined; id = undefined; data = [];
      } else if (line.startsWith(":")) {
        continue;
      } else if (line.startsWith("event:")) {
        type = line.slice(6).trim();
      } else if (line.startsWith("id:")) {
        id = line.slice(3).trim();
      } else if (line.startsWith("data:")) {
        data.push(line.slice(5).replace(/^ /, ""));
      }
    }
  }
}
