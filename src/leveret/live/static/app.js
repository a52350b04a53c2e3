// leveret live viewer: receives slices over a websocket and draws them.
// Binary messages: uint32 (little-endian) header length, JSON header
// {name, width, height}, then width*height 8-bit pixels (range applied by the server).
"use strict";

const state = { ws: null, volume: null, drawn: {}, lastState: null, initialised: false };
window.leveretLive = state;   // read by the tests

function $(id) { return document.getElementById(id); }

function canvasFor(name) {
  let canvas = $("slice-" + name);
  if (!canvas) {   // an axial slice: a figure of its own
    const figure = document.createElement("figure");
    canvas = document.createElement("canvas");
    canvas.id = "slice-" + name;
    const caption = document.createElement("figcaption");
    caption.textContent = "axial " + name;
    figure.appendChild(canvas);
    figure.appendChild(caption);
    $("axial").appendChild(figure);
  }
  return canvas;
}

function drawImage(buffer) {
  const n = new DataView(buffer).getUint32(0, true);
  const header = JSON.parse(new TextDecoder().decode(new Uint8Array(buffer, 4, n)));
  const pixels = new Uint8Array(buffer, 4 + n, header.width * header.height);
  const canvas = canvasFor(header.name);
  if (canvas.width !== header.width || canvas.height !== header.height) {
    canvas.width = header.width;
    canvas.height = header.height;
  }
  const ctx = canvas.getContext("2d");
  const image = ctx.createImageData(header.width, header.height);
  // rows are stored bottom-up in the volume's convention (row 0 = lowest y or z): flip for display
  for (let j = 0; j < header.height; j++) {
    const src = (header.name === "sinogram" ? j : header.height - 1 - j) * header.width;
    for (let i = 0; i < header.width; i++) {
      const v = pixels[src + i], o = 4 * (j * header.width + i);
      image.data[o] = v; image.data[o + 1] = v; image.data[o + 2] = v; image.data[o + 3] = 255;
    }
  }
  ctx.putImageData(image, 0, 0);
  let sum = 0;
  for (let k = 0; k < pixels.length; k++) sum = (sum * 31 + pixels[k]) >>> 0;
  const previous = state.drawn[header.name] || { count: 0 };
  state.drawn[header.name] = { count: previous.count + 1, checksum: sum, version: state.lastState && state.lastState.version,
                               views: state.lastState && state.lastState.views };
  canvas.dataset.checksum = String(sum);
  canvas.dataset.views = String(state.lastState ? state.lastState.views : 0);
}

function setupSliders(volume) {
  const axes = { x: volume.extent.x, y: volume.extent.y, z: volume.extent.z };
  const centre = { x: volume.center[2], y: volume.center[1], z: volume.center[0] };
  for (const a of ["x", "y", "z"]) {
    const input = $("point-" + a);
    input.min = axes[a][0]; input.max = axes[a][1];
    input.step = "any";
    input.value = centre[a];
    $("point-" + a + "-value").textContent = Number(centre[a]).toFixed(2);
  }
}

function sendOrthogonal() {
  const point = ["x", "y", "z"].map(a => Number($("point-" + a).value));
  const angles = ["a", "b", "c"].map(a => Number($("angle-" + a).value));
  ["x", "y", "z"].forEach((a, k) => $("point-" + a + "-value").textContent = point[k].toFixed(2));
  ["a", "b", "c"].forEach((a, k) => $("angle-" + a + "-value").textContent = angles[k].toFixed(0));
  send({ type: "orthogonal", point, angles });
}

function send(message) {
  if (state.ws && state.ws.readyState === WebSocket.OPEN) state.ws.send(JSON.stringify(message));
}

function reasons(counts) {   // {"reason": n, ...} as "n reason, ..." for a tooltip
  return Object.entries(counts || {}).map(([k, n]) => n + " " + k).join(", ");
}

function showState(s) {
  state.lastState = s;
  $("stat-views").textContent = s.views;
  $("stat-fps").textContent = s.fps.toFixed(1);
  // lag: from the newest frame's arrival to its drawing here (same clock on one
  // machine), measured when new frames show up; a re-render of old ones keeps it
  if (s.arrived_epoch_ms && s.views !== state.lagViews) {
    state.lagViews = s.views;
    state.lagMs = Math.max(0, Date.now() - s.arrived_epoch_ms);
    $("stat-lag").textContent = state.lagMs.toFixed(0) + " ms";
  }
  $("stat-rejected").textContent = s.rejected;
  $("stat-rejected").title = reasons(s.rejected_reasons);
  $("stat-missing").textContent = s.missing;
  $("stat-dropped").textContent = s.dropped;
  $("stat-dropped").title = reasons(s.dropped_reasons);
  $("stat-bad").textContent = s.bad_messages;
  $("stat-queued").textContent = s.queued;
  if (s.request_error) $("message").textContent = s.request_error;
  $("stat-status").textContent = s.error ? "error: " + s.error : (s.ended ? "source ended" : "receiving");
  if (!state.initialised) {
    state.volume = s.volume;
    setupSliders(s.volume);
    $("save").disabled = !s.can_save;
    state.initialised = true;
  }
  if ($("range-auto").checked) {
    $("range-lo").value = s.range[0].toPrecision(4);
    $("range-hi").value = s.range[1].toPrecision(4);
  }
  // drop the canvases of axial slices no longer watched
  const names = new Set(s.slices.map(x => x.name));
  for (const fig of Array.from($("axial").children)) {
    const id = fig.querySelector("canvas").id.slice(6);
    if (!names.has(id)) fig.remove();
  }
}

function connect() {
  const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws");
  ws.binaryType = "arraybuffer";
  state.ws = ws;
  ws.onmessage = (event) => {
    if (typeof event.data === "string") {
      const m = JSON.parse(event.data);
      if (m.type === "state") showState(m);
      else if (m.type === "saved") $("save-result").textContent = "wrote " + m.files.join(", ");
      else if (m.type === "error") $("message").textContent = m.message;
    } else {
      drawImage(event.data);
    }
  };
  ws.onclose = () => { $("stat-status").textContent = "disconnected; retrying"; setTimeout(connect, 1000); };
}

for (const id of ["point-x", "point-y", "point-z", "angle-a", "angle-b", "angle-c"]) {
  $(id).addEventListener("input", sendOrthogonal);
}
$("reset-slices").addEventListener("click", () => {
  if (state.volume) setupSliders(state.volume);
  for (const a of ["a", "b", "c"]) $("angle-" + a).value = 0;
  sendOrthogonal();
});
$("axial-apply").addEventListener("click", () => {
  const z = $("axial-z").value.split(",").map(t => t.trim()).filter(t => t.length).map(Number);
  if (z.some(Number.isNaN)) { $("message").textContent = "axial z: numbers separated by commas"; return; }
  $("message").textContent = "";
  send({ type: "axial", z });   // the server answers with an error message past its limit (max_axial)
});
$("range-apply").addEventListener("click", () => {
  if ($("range-auto").checked) send({ type: "range", auto: true });
  else send({ type: "range", lo: Number($("range-lo").value), hi: Number($("range-hi").value) });
});
$("range-auto").addEventListener("change", () => {
  if ($("range-auto").checked) send({ type: "range", auto: true });
});
$("save").addEventListener("click", () => send({ type: "save" }));
connect();
