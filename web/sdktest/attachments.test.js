// Attachments in the SDK, without tus (the upload itself is exercised in the browser tests,
// internal/webtest): the content type a file's MIME type picks, the message a send carries,
// the signed URLs and their reuse, and how the page labels and sizes attachments.

import test from 'node:test';
import assert from 'node:assert/strict';

import {
  ParleyClient, ContentType, attachmentContentType, attachmentOf, attachmentLabel, formatBytes, messageText, memoryStorage,
} from '../static/sdk/parley.js';
import { CONV, FakeServer } from './fakeserver.js';

async function until(what, pred, timeout = 3000) {
  const deadline = Date.now() + timeout;
  while (!pred()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

function newClient(server) {
  return new ParleyClient({
    token: 'tok', userId: 'alice', baseURL: 'http://fake', fetch: server.fetch, WebSocket: server.WebSocket,
    storage: memoryStorage(), backoff: { base: 2, max: 10 }, requestTimeout: 300, pollWait: 1, saveDelay: 1, transport: 'longpoll',
  });
}

const photo = {
  id: 'a_photo000000000000000000000', complete: true, mime_type: 'image/png', size: 48213, sha256: 'ab'.repeat(32),
  width: 640, height: 480, thumbnail: true, preview: 'data:image/jpeg;base64,/9j/AA==', created_at: 1700000000000,
};
const pdf = { id: 'a_pdf00000000000000000000000', complete: true, mime_type: 'application/pdf', size: 1536, thumbnail: false, created_at: 1700000000000 };

test('the content type follows the MIME type: image, audio, video, else file', () => {
  assert.equal(attachmentContentType('image/png'), ContentType.IMAGE);
  assert.equal(attachmentContentType('image/svg+xml'), ContentType.IMAGE);
  assert.equal(attachmentContentType('audio/ogg'), ContentType.AUDIO);
  assert.equal(attachmentContentType('video/mp4'), ContentType.VIDEO);
  assert.equal(attachmentContentType('Video/WebM'), ContentType.VIDEO);
  assert.equal(attachmentContentType('application/pdf'), ContentType.FILE);
  assert.equal(attachmentContentType('text/plain; charset=utf-8'), ContentType.FILE);
  assert.equal(attachmentContentType(''), ContentType.FILE);
  assert.equal(attachmentContentType(undefined), ContentType.FILE);
});

test('sendAttachment sends {attachment_id, name, caption} with the content type, and the server adds the metadata', async (t) => {
  const server = new FakeServer();
  server.attachments.set(photo.id, photo);
  server.attachments.set(pdf.id, pdf);
  const c = newClient(server);
  t.after(() => c.stop());
  await c.start();
  await until('online', () => c.status === 'online');

  const id = c.sendAttachment(CONV, photo, { name: 'beach.png', caption: 'Look!' });
  // Shown at once, laid out from the local metadata.
  const pending = c.messages(CONV).at(-1);
  assert.equal(pending.client_msg_id, id);
  assert.equal(pending.content_type, ContentType.IMAGE);
  assert.equal(attachmentOf(pending).attachment.width, 640);
  await until('acked', () => c.state.outbox.length === 0);

  c.sendAttachment(CONV, pdf, { name: 'report.pdf' });
  await until('acked', () => c.state.outbox.length === 0);
  const [m1, m2] = server.msgs;
  assert.equal(m1.content_type, ContentType.IMAGE);
  assert.equal(m1.client_msg_id, id);
  assert.deepEqual({ ...m1.content, attachment: undefined }, { attachment_id: photo.id, name: 'beach.png', caption: 'Look!', attachment: undefined });
  assert.equal(m2.content_type, ContentType.FILE);
  assert.deepEqual(Object.keys(m2.content).sort(), ['attachment', 'attachment_id', 'name']); // no empty caption
  assert.equal(m2.content.attachment.size, 1536);

  // The stored copy replaces the pending one; text and labels come from the attachment.
  await until('stored messages', () => c.messages(CONV).filter((m) => !m.pending).length === 2);
  const [s1, s2] = c.messages(CONV);
  assert.equal(messageText(s1), 'Look!');
  assert.equal(messageText(s2), '');
  assert.equal(attachmentLabel(s1), 'Photo');
  assert.equal(attachmentLabel(s2), 'File: report.pdf');
  assert.equal(attachmentOf({ ...s1, recalled: true }), null);
  assert.equal(attachmentOf({ content_type: 1, content: { text: 'x' } }), null);
});

test('attachmentURLs asks for signed URLs once, resolves them against the server, and reuses them', async () => {
  const server = new FakeServer();
  server.attachments.set(photo.id, photo);
  server.attachments.set(pdf.id, pdf);
  const c = newClient(server);

  const [u1, u2] = await Promise.all([c.attachmentURLs(photo.id), c.attachmentURLs(photo.id)]);
  assert.deepEqual(u1, u2);
  assert.match(u1.content, /^http:\/\/fake\/v1\/attachments\/a_photo0+\/content\?exp=\d+&sig=s1$/);
  assert.match(u1.thumbnail, /^http:\/\/fake\/v1\/attachments\/a_photo0+\/thumbnail\?/);
  assert.ok(u1.expires_at > Date.now());
  assert.equal(server.urlRequests.length, 1);
  assert.ok(server.requests.includes(`POST /v1/attachments/${photo.id}/urls`));
  assert.deepEqual(await c.attachmentURLs(photo.id), u1); // cached
  assert.equal(server.urlRequests.length, 1);

  const f = await c.attachmentURLs(pdf.id, { expiresIn: 60 }); // a chosen expiry: asked for, not cached
  assert.equal(f.thumbnail, undefined);
  assert.deepEqual(server.urlRequests[1].body, { expires_in: 60 });

  await assert.rejects(c.attachmentURLs('a_missing'), (e) => e.code === 404);
  server.attachments.set('a_missing', pdf);
  await c.attachmentURLs('a_missing'); // a failure is not cached
  assert.deepEqual(await c.attachment(photo.id), photo);
});

test('upload without tus-js-client loaded says so', async () => {
  const c = newClient(new FakeServer());
  await assert.rejects(c.upload(new Blob(['x'])), /tus-js-client is not loaded/);
});

test('sizes read as people read them', () => {
  assert.equal(formatBytes(0), '0 B');
  assert.equal(formatBytes(999), '999 B');
  assert.equal(formatBytes(1536), '1.5 KB');
  assert.equal(formatBytes(48213), '47 KB');
  assert.equal(formatBytes(5 * 1024 * 1024), '5 MB');
  assert.equal(formatBytes(3.25 * 1024 ** 3), '3.3 GB');
});
