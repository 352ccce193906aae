// Unit tests of the SDK's pure parts: backoff, retry decisions, cursor and seq gaps, and the
// merge rules of ChatState. Run with `node --test web/`.

import test from 'node:test';
import assert from 'node:assert/strict';

import {
  ChatState, MsgState, backoffDelay, cursorStep, insertMessage, mergeMessage, missingRanges, sendOutcome,
} from '../static/sdk/parley.js';

const CONV = 'd_ab';

function brief(over = {}) {
  return {
    conv_id: CONV, type: 'direct', name: '', owner_id: '', members_count: 2, fanout: 'write', max_seq: 0,
    read_seq: 0, delivered_seq: 0, cleared_seq: 0, unread: 0, last_message: null, peer_read_seq: 0,
    peer_delivered_seq: 0, updated_at: 1, ...over,
  };
}

function msg(seq, sender = 'bob', over = {}) {
  return {
    conv_id: CONV, seq, msg_id: `m_${seq}`, client_msg_id: `${sender}-${seq}`, sender_id: sender, content_type: 1,
    content: { text: `text ${seq}` }, extra: null, created_at: 1000 + seq, recalled: false, ...over,
  };
}

/** A state for alice that has applied a snapshot with the given briefs and messages. */
function aliceWith(b = brief(), messages = [], cursor = 10) {
  const s = new ChatState('alice');
  s.applySnapshot({ cursor, conversations: [b], messages: { [b.conv_id]: messages }, read_positions: { [b.conv_id]: { alice: b.read_seq, bob: b.peer_read_seq ?? 0 } } }, 20);
  s.takeEffects();
  return s;
}

let cursor = 10;
const ev = (type, data, conv = CONV) => ({ cursor: ++cursor, type, conv_id: conv, ts: 1, data });

test('backoffDelay grows exponentially, is capped, and keeps half of the cap as a floor', () => {
  const opts = { base: 100, max: 1000 };
  assert.equal(backoffDelay(0, { ...opts, random: () => 0 }), 50);
  assert.equal(backoffDelay(0, { ...opts, random: () => 1 }), 100);
  assert.equal(backoffDelay(3, { ...opts, random: () => 1 }), 800);
  assert.equal(backoffDelay(4, { ...opts, random: () => 1 }), 1000);
  assert.equal(backoffDelay(50, { ...opts, random: () => 0 }), 500);
  for (let a = 0; a < 12; a++) {
    const d = backoffDelay(a, opts);
    const cap = Math.min(1000, 100 * 2 ** a);
    assert.ok(d >= cap / 2 && d <= cap, `attempt ${a}: ${d} outside [${cap / 2}, ${cap}]`);
  }
});

test('sendOutcome retries what may have been stored and fails what never will be', () => {
  const cases = { 0: 'retry', 429: 'retry', 500: 'retry', 503: 'retry', 401: 'auth', 400: 'fail', 403: 'fail', 404: 'fail', 413: 'fail' };
  for (const [code, want] of Object.entries(cases)) assert.equal(sendOutcome(Number(code)), want, `code ${code}`);
});

test('cursorStep: apply the next cursor, ignore replays, report gaps', () => {
  assert.equal(cursorStep(5, 6), 'apply');
  assert.equal(cursorStep(5, 5), 'dup');
  assert.equal(cursorStep(5, 2), 'dup');
  assert.equal(cursorStep(5, 8), 'gap');
  assert.equal(cursorStep(0, 1), 'apply');
});

test('missingRanges finds the holes between loaded seqs', () => {
  assert.deepEqual(missingRanges([1, 2, 3], 1, 3), []);
  assert.deepEqual(missingRanges([1, 4, 5, 9], 1, 10), [[2, 3], [6, 8], [10, 10]]);
  assert.deepEqual(missingRanges([], 3, 5), [[3, 5]]);
  assert.deepEqual(missingRanges([2, 3], 1, 3), [[1, 1]]);
  assert.deepEqual(missingRanges([5, 6, 20], 5, 7), [[7, 7]]);
});

test('mergeMessage: a recall is final, whichever copy arrives first', () => {
  const live = msg(1);
  const recalled = { ...msg(1), content: null, extra: null, recalled: true };
  for (const [a, b] of [[live, recalled], [recalled, live]]) {
    const m = mergeMessage(a, b);
    assert.equal(m.recalled, true);
    assert.equal(m.content, null);
  }
  assert.deepEqual(mergeMessage(null, live), live);
});

test('insertMessage keeps seq order and merges duplicates', () => {
  const list = [];
  for (const s of [3, 1, 2, 3, 1]) insertMessage(list, msg(s));
  assert.deepEqual(list.map((m) => m.seq), [1, 2, 3]);
  assert.equal(insertMessage(list, msg(2)), false, 'an identical copy changes nothing');
  assert.equal(insertMessage(list, { ...msg(2), recalled: true }), true);
  assert.equal(list[1].content, null);
});

test('events: replays are ignored, gaps are refused, order is by seq', () => {
  const s = aliceWith(brief(), [], 10);
  assert.equal(s.applyEvent({ cursor: 11, type: 'message', conv_id: CONV, ts: 1, data: msg(2) }), 'applied');
  assert.equal(s.applyEvent({ cursor: 11, type: 'message', conv_id: CONV, ts: 1, data: msg(2) }), 'dup');
  assert.equal(s.applyEvent({ cursor: 13, type: 'message', conv_id: CONV, ts: 1, data: msg(4) }), 'gap');
  assert.equal(s.cursor, 11, 'a gap applies nothing');
  assert.equal(s.applyEvent({ cursor: 12, type: 'message', conv_id: CONV, ts: 1, data: msg(1) }), 'applied');
  assert.deepEqual(s.messages(CONV).map((m) => m.seq), [1, 2]);
  assert.equal(s.conversation(CONV).max_seq, 2);
  assert.equal(s.conversation(CONV).last_message.seq, 2, 'last_message is the highest seq, not the latest event');
  assert.equal(s.applyEvent({ cursor: 13, type: 'future_type', conv_id: CONV, ts: 1, data: {} }), 'applied', 'unknown types are skipped');
});

test('unread: from the brief, up with messages from others, down with reads from any device', () => {
  cursor = 10;
  // 5 messages, read up to 2, but the user joined at 3: unread = 5 - max(2, 3) = 2.
  const s = aliceWith(brief({ max_seq: 5, read_seq: 2, delivered_seq: 2, unread: 2 }));
  assert.equal(s.unread(CONV), 2);
  s.applyEvent(ev('message', msg(6)));
  assert.equal(s.unread(CONV), 3);
  s.applyEvent(ev('read', { user_id: 'alice', read_seq: 4 })); // another device read up to 4
  assert.equal(s.unread(CONV), 2);
  s.applyEvent(ev('read', { user_id: 'alice', read_seq: 3 })); // a stale read changes nothing
  assert.equal(s.unread(CONV), 2);
  s.applyEvent(ev('message', msg(7, 'alice'))); // sending reads everything before it
  assert.equal(s.unread(CONV), 0);
  assert.equal(s.conversation(CONV).read_seq, 7);
});

test('ticks: sent -> delivered -> read from the peer positions; delivered is at least read', () => {
  cursor = 10;
  const s = aliceWith();
  s.applyEvent(ev('message', msg(1, 'alice')));
  const m = () => s.messages(CONV)[0];
  assert.equal(s.msgState(m()), MsgState.SENT);
  s.applyEvent(ev('delivered', { user_id: 'bob', delivered_seq: 1 }));
  assert.equal(s.msgState(m()), MsgState.DELIVERED);
  s.applyEvent(ev('message', msg(2, 'alice')));
  s.applyEvent(ev('read', { user_id: 'bob', read_seq: 2 })); // no delivered event for 2: read implies it
  assert.equal(s.msgState(s.messages(CONV)[1]), MsgState.READ);
  assert.equal(s.conversation(CONV).peer_delivered_seq, 2);
  s.applyEvent(ev('recall', { seq: 2, msg_id: 'm_2', sender_id: 'alice' }));
  assert.equal(s.msgState(s.messages(CONV)[1]), MsgState.RECALLED);
});

test('a message from the peer implies the peer read everything up to it', () => {
  cursor = 10;
  const s = aliceWith();
  s.applyEvent(ev('message', msg(1, 'alice')));
  s.applyEvent(ev('message', msg(2, 'bob')));
  assert.equal(s.msgState(s.messages(CONV)[0]), MsgState.READ);
});

test('recall removes the content, also from the list preview', () => {
  cursor = 10;
  const s = aliceWith(brief({ max_seq: 1, unread: 1, last_message: msg(1) }), [msg(1)]);
  s.applyEvent(ev('recall', { seq: 1, msg_id: 'm_1', sender_id: 'bob' }));
  assert.equal(s.messages(CONV)[0].content, null);
  assert.equal(s.conversation(CONV).last_message.recalled, true);
  s.applyEvent(ev('message', msg(1))); // a replayed message event from before the recall
  assert.equal(s.messages(CONV)[0].recalled, true, 'the recall sticks');
});

test('conv_deleted hides and clears; the next message shows it again with only new history', () => {
  cursor = 10;
  const s = aliceWith(brief({ max_seq: 2, unread: 2, last_message: msg(2) }), [msg(1), msg(2)]);
  s.applyEvent(ev('conv_deleted', { cleared_seq: 2 }));
  assert.equal(s.conversations().length, 0);
  assert.equal(s.messages(CONV).length, 0);
  assert.equal(s.unread(CONV), 0);
  s.applyEvent(ev('message', msg(1))); // late replay of cleared history: dropped
  assert.equal(s.conversations().length, 0);
  s.applyEvent(ev('message', msg(3)));
  assert.equal(s.conversations().length, 1);
  assert.deepEqual(s.messages(CONV).map((m) => m.seq), [3]);
  assert.equal(s.unread(CONV), 1);
});

test('a conv_updated saying removed drops the conversation; being added again brings it back', () => {
  cursor = 10;
  const G = 'g_team';
  const group = { ...brief({ conv_id: G, type: 'group', name: 'Team', owner_id: 'bob', members_count: 3, max_seq: 1 }), peer_read_seq: undefined, peer_delivered_seq: undefined };
  const s = aliceWith(group, [msg(1, 'bob', { conv_id: G })]);
  s.enqueue(G, 1, { text: 'pending' });
  s.takeChanged();
  s.applyEvent(ev('conv_updated', { ...group, members_count: 2, removed: true }, G));
  assert.equal(s.conversations().length, 0);
  assert.equal(s.conversation(G), null);
  assert.equal(s.messages(G).length, 0);
  assert.deepEqual(s.members(G), []);
  assert.equal(s.outbox.length, 0, 'a pending send to it is dropped');
  assert.ok(s.takeChanged().has(G), 'the removal is reported as a change');
  s.applyEvent(ev('conv_updated', { ...group, max_seq: 2 }, G));
  assert.equal(s.conversations().length, 1);
});

test('a stale conv_updated brief never moves positions back', () => {
  cursor = 10;
  const s = aliceWith(brief({ max_seq: 5, read_seq: 5, delivered_seq: 5, peer_read_seq: 4, peer_delivered_seq: 5, last_message: msg(5) }));
  s.applyEvent(ev('conv_updated', brief({ max_seq: 1, read_seq: 0, unread: 1, peer_read_seq: 0 })));
  const c = s.conversation(CONV);
  assert.equal(c.max_seq, 5);
  assert.equal(c.read_seq, 5);
  assert.equal(c.peer_read_seq, 4);
  assert.equal(c.last_message.seq, 5);
  assert.equal(s.unread(CONV), 0);
});

test('conversations are ordered by activity', () => {
  cursor = 10;
  const s = new ChatState('alice');
  s.applySnapshot({
    cursor: 10,
    conversations: [brief({ conv_id: 'a', updated_at: 5 }), brief({ conv_id: 'b', updated_at: 9 }), brief({ conv_id: 'c', type: 'group', name: 'G', updated_at: 7 })],
    messages: {}, read_positions: {},
  });
  assert.deepEqual(s.conversations().map((c) => c.conv_id), ['b', 'c', 'a']);
  s.applyEvent(ev('message', { ...msg(1), conv_id: 'a', created_at: 100 }, 'a'));
  assert.deepEqual(s.conversations().map((c) => c.conv_id), ['a', 'b', 'c']);
});

test('outbox: pending until acked, whether the ack or the message event comes first', () => {
  for (const order of ['ack first', 'event first']) {
    cursor = 10;
    const s = aliceWith();
    const p = s.enqueue(CONV, 1, { text: 'hi' });
    assert.equal(s.messages(CONV).length, 1);
    assert.equal(s.msgState(s.messages(CONV)[0]), MsgState.SENDING);
    const ack = { code: 0, conv_id: CONV, client_msg_id: p.client_msg_id, msg_id: 'm_1', seq: 1, created_at: 1001, duplicate: false };
    const event = ev('message', msg(1, 'alice', { client_msg_id: p.client_msg_id, content: { text: 'hi' } }));
    if (order === 'ack first') {
      assert.equal(s.applyAck(p.client_msg_id, ack), true);
      s.applyEvent(event);
    } else {
      s.applyEvent(event);
      assert.equal(s.applyAck(p.client_msg_id, ack), false, 'already resolved by the event');
    }
    assert.equal(s.outbox.length, 0, order);
    assert.deepEqual(s.messages(CONV).map((m) => [m.seq, m.pending]), [[1, false]], order);
  }
});

test('a duplicate ack (the retry of a stored message) resolves the same single message', () => {
  cursor = 10;
  const s = aliceWith();
  const p = s.enqueue(CONV, 1, { text: 'once' });
  s.applyEvent(ev('message', msg(1, 'alice', { client_msg_id: p.client_msg_id, content: { text: 'once' } })));
  s.applyAck(p.client_msg_id, { code: 0, conv_id: CONV, client_msg_id: p.client_msg_id, msg_id: 'm_1', seq: 1, created_at: 1001, duplicate: true });
  assert.equal(s.messages(CONV).length, 1);
});

test('a failed send can be retried with the same client_msg_id or discarded', () => {
  const s = aliceWith();
  const p = s.enqueue(CONV, 1, { text: 'x' });
  s.failSend(p.client_msg_id, 'forbidden');
  assert.equal(s.msgState(s.messages(CONV)[0]), MsgState.FAILED);
  s.retrySend(p.client_msg_id);
  assert.equal(s.outbox[0].client_msg_id, p.client_msg_id);
  assert.equal(s.msgState(s.messages(CONV)[0]), MsgState.SENDING);
  s.discardSend(p.client_msg_id);
  assert.equal(s.messages(CONV).length, 0);
});

test('messages from others ask for a delivered receipt; own messages do not', () => {
  cursor = 10;
  const s = aliceWith();
  s.applyEvent(ev('message', msg(1, 'alice')));
  assert.deepEqual(s.takeEffects(), []);
  s.applyEvent(ev('message', msg(2, 'bob')));
  assert.deepEqual(s.takeEffects(), [{ type: 'delivered', conv_id: CONV, seq: 2 }]);
});

test('the peer of a direct conversation comes from read positions or messages', () => {
  const s = aliceWith();
  assert.equal(s.peerOf(CONV), 'bob');
  cursor = 10;
  const t = new ChatState('alice');
  t.applySnapshot({ cursor: 10, conversations: [brief()], messages: {}, read_positions: {} });
  assert.equal(t.peerOf(CONV), '');
  t.applyEvent(ev('message', msg(1, 'bob')));
  assert.equal(t.peerOf(CONV), 'bob');
});

test('gaps() lists the holes between the oldest loaded message and max_seq', () => {
  cursor = 10;
  const s = aliceWith(brief({ max_seq: 3, unread: 3 }), [msg(1), msg(3)]);
  assert.deepEqual(s.gaps(CONV), [[2, 2]]);
  s.applyEvent(ev('message', msg(6)));
  assert.deepEqual(s.gaps(CONV), [[2, 2], [4, 5]]);
  s.addHistory(CONV, [msg(2), msg(4), msg(5)]);
  assert.deepEqual(s.gaps(CONV), []);
});

test('saved state round-trips: cursor, conversations, messages and the outbox together', () => {
  cursor = 10;
  const s = aliceWith(brief({ max_seq: 1, unread: 1, last_message: msg(1) }), [msg(1)]);
  s.applyEvent(ev('message', msg(2)));
  const p = s.enqueue(CONV, 1, { text: 'unsent' });
  const back = ChatState.fromJSON(JSON.parse(JSON.stringify(s.toJSON())), 'alice');
  assert.equal(back.cursor, s.cursor);
  assert.equal(back.synced, true);
  assert.deepEqual(back.messages(CONV).map((m) => m.seq), [1, 2, 0]);
  assert.equal(back.outbox[0].client_msg_id, p.client_msg_id);
  assert.equal(back.unread(CONV), 2);
  assert.equal(ChatState.fromJSON(s.toJSON(), 'mallory').synced, false, "another user's state is not loaded");
  assert.equal(ChatState.fromJSON({ v: 999 }, 'alice').synced, false, 'an unknown version is ignored');
});
