// Parley's service worker: shows Web Push notifications. Served at /sw.js so that its scope
// is the whole app ("/"). A classic script (not a module), so every browser with Push runs
// it; it loads nothing and intercepts no fetch.
//
// A push's data is the JSON of the server's Notification.Data() (internal/push/provider.go):
//   {"type": "message"|"badge", "push_id", "badge", and for a message "conv_id", "seq",
//    "cursor", "sender_id", "sender_name", "preview"?, "kind"?}
// "kind" says what an attachment message carries (image, file, audio, video), for an alert
// that says "Photo" without showing anything of it.
// A message shows a notification titled by the sender, tagged by the conversation (so a
// burst shows as one) and sets the app badge; a badge push only sets the badge. Clicking a
// notification focuses the app (or opens it) at that conversation.

'use strict';

/** What an alert says of a message that carries an attachment of each kind. */
const kindLabels = { image: 'Photo', file: 'File', audio: 'Voice message', video: 'Video' };

/** The notification a message push shows, as [title, options]; null for a badge push. */
function notificationFor(data) {
  if (!data || data.type !== 'message' || !data.conv_id) return null;
  return [data.sender_name || data.sender_id || 'Parley', {
    body: data.preview || kindLabels[data.kind] || 'New message',
    tag: data.conv_id,
    icon: '/static/icon.svg',
    badge: '/static/icon.svg',
    timestamp: Date.now(),
    data: { conv_id: data.conv_id, seq: Number(data.seq) || 0 },
  }];
}

/** The app's URL for a conversation, as the page routes it (#c=<conv_id>). */
function conversationURL(origin, convId) {
  return `${origin}/#c=${encodeURIComponent(convId)}`;
}

/** Parses a push's data: JSON, or null if there is none or it is not JSON. */
function pushData(event) {
  if (!event.data) return null;
  try {
    return event.data.json();
  } catch {
    return null;
  }
}

/** Sets the app badge where the browser has one (Badging API); a failure is not fatal. */
async function setBadge(value) {
  const nav = self.navigator;
  const n = Number(value);
  if (!nav || !Number.isFinite(n)) return;
  try {
    if (n > 0 && nav.setAppBadge) await nav.setAppBadge(n);
    else if (n <= 0 && nav.clearAppBadge) await nav.clearAppBadge();
  } catch { /* not allowed here (no installed app): the notification is what counts */ }
}

/** True when a window of the app is visible and focused on that conversation. */
async function readingNow(convId) {
  const wins = await self.clients.matchAll({ type: 'window', includeUncontrolled: true });
  const url = conversationURL(self.location.origin, convId);
  return wins.some((w) => w.focused && w.visibilityState === 'visible' && w.url === url);
}

async function onPush(event) {
  const data = pushData(event);
  if (!data) return;
  await setBadge(data.badge);
  const shown = notificationFor(data);
  // A badge push shows nothing: with userVisibleOnly a browser may then show a notice of its
  // own once its budget for silent pushes runs out; it is the best the platform allows.
  if (!shown || await readingNow(data.conv_id)) return;
  await self.registration.showNotification(...shown);
}

async function onNotificationClick(event) {
  event.notification.close();
  const convId = event.notification.data?.conv_id;
  const origin = self.location.origin;
  const wins = await self.clients.matchAll({ type: 'window', includeUncontrolled: true });
  const app = wins.find((w) => new URL(w.url).origin === origin && new URL(w.url).pathname === '/');
  if (app) {
    // The page routes on the message (it may not be controlled by this worker, so
    // client.navigate is not available), then comes to the front.
    if (convId) app.postMessage({ type: 'open', conv_id: convId });
    await app.focus();
    return;
  }
  await self.clients.openWindow(convId ? conversationURL(origin, convId) : `${origin}/`);
}

self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (event) => event.waitUntil(self.clients.claim()));
self.addEventListener('push', (event) => event.waitUntil(onPush(event)));
self.addEventListener('notificationclick', (event) => event.waitUntil(onNotificationClick(event)));
