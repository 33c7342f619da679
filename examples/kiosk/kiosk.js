// The example kiosk: an NFC check-in page on FieldHAL's web door. A tag tapped on the kit's
// reader shows its record; the kit buzzes and sounds the confirmation; the camera's picture
// and the kit's position beside it. config.js (written by ./run) says where the door is and
// holds the page's token.
import { door, token } from "./config.js";

const { FieldHAL, FieldHALError } = await import(`${door}/fieldhal.js`);
const kit = new FieldHAL({ url: door, token });
const $ = (id) => document.getElementById(id);
const checkIns = [];

function problem(error) {
  $("problem").textContent = error instanceof FieldHALError ? `${error.kind}: ${error.detail}` : String(error);
}

async function showStatus() {
  try {
    const status = await kit.status();
    $("status").textContent = `kit: FieldHAL ${status.version}, this page may use ${status.caller.scopes.join(", ")}`;
    $("status").dataset.ready = "true";
  } catch (error) {
    problem(error);
    $("status").textContent = "kit: refused";
    $("status").dataset.refused = error.kind ?? "network";
  }
}

async function checkIn(event) {
  const { tag, device } = event;
  const record = tag.records[0];
  const what = record ? record.value : "(an empty tag)";
  $("checkin").textContent = `Checked in: ${what}`;
  $("checkin").className = "ok";
  $("checkin").dataset.uid = tag.uid;
  checkIns.unshift(`${new Date().toLocaleTimeString()} ${tag.uid} on ${device}: ${what}`);
  $("log").replaceChildren(...checkIns.slice(0, 5).map((line) => Object.assign(document.createElement("li"), { textContent: line })));
  try {
    const [felt, heard] = await Promise.all([kit.playHaptics("success"), kit.playSound("soft-alert")]);
    $("feedback").textContent = `felt ${felt.pattern} (${felt.milliseconds} ms), heard ${heard.sound} (${heard.milliseconds} ms)`;
    $("feedback").dataset.played = "true";
  } catch (error) {
    problem(error);
  }
}

function follow() {
  kit.events({
    types: ["tag", "fix"],
    onOpen: () => {
      $("stream").textContent = "live";
      $("stream").dataset.opened = String(Number($("stream").dataset.opened ?? 0) + 1);
    },
    onEvent: (event) => {
      if (event.type === "tag" && event.data.state === "found") checkIn(event.data);
      if (event.type === "fix") {
        const fix = event.data;
        $("position").textContent = `position: ${fix.latitude.toFixed(5)}, ${fix.longitude.toFixed(5)} ±${fix.horizontalAccuracy ?? "?"} m`;
        $("position").dataset.fixes = String(Number($("position").dataset.fixes ?? 0) + 1);
      }
      $("stream").dataset.lastEventId = event.id ?? "";
    },
    onGap: (gap) => {
      $("gap").textContent = `Some events were lost while the page was away: ${gap.reason}`;
      $("gap").dataset.gaps = String(Number($("gap").dataset.gaps ?? 0) + 1);
    },
    onError: (error) => {
      $("stream").textContent = error.status >= 400 ? "refused" : "reconnecting…";
      problem(error);
    },
  });
}

function showCamera() {
  // The camera live for a "look at the camera" step: Motion-JPEG in a plain <img>.
  $("camera").src = kit.previewURL({ width: 320, height: 240, fps: 5 });
}

await showStatus();
if ($("status").dataset.ready) {
  follow();
  showCamera();
}
