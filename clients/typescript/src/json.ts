// JSON values in and out. historyd carries any-JSON fields as JSON text (DESIGN.md "Wire model": key
// order reaches the prompt), metadata as google.protobuf.Struct (a JsonObject in the generated
// types) and participants as google.protobuf.Value, whose absence and JSON null differ.

import { create, fromJson, toJson, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { ValueSchema, type Value } from "@bufbuild/protobuf/wkt";

import type { Message } from "./gen/historyd/v1/envelope_pb.js";

export type { JsonObject, JsonValue };

/**
 * A participant (sender or recipient) as LionAGI has it: a string (a role name, a UUID, any other
 * text), `null` (an explicit None: as a recipient, a broadcast), or `undefined` (never given, UNSET).
 */
export type Participant = string | null | undefined;

/** The wire form of a participant: undefined stays absent, null becomes the JSON null Value. */
export function participantValue(p: Participant): Value | undefined {
  if (p === undefined) return undefined;
  if (p === null) return create(ValueSchema, { kind: { case: "nullValue", value: 0 } });
  return create(ValueSchema, { kind: { case: "stringValue", value: p } });
}

/** A participant read back: absent is undefined, the JSON null is null, text is the string. */
export function participantOf(v: Value | undefined): Participant {
  if (v === undefined) return undefined;
  switch (v.kind.case) {
    case "nullValue":
      return null;
    case "stringValue":
      return v.kind.value;
    case undefined:
      return undefined;
    default:
      // The server only ever sends the three above (envelope.proto: any other kind is refused).
      throw new TypeError(`historyd: a participant is a string or null, got ${JSON.stringify(toJson(ValueSchema, v))}`);
  }
}

/** A google.protobuf.Value as the JSON value it holds. */
export function valueToJSON(v: Value | undefined): JsonValue | undefined {
  return v === undefined ? undefined : toJson(ValueSchema, v);
}

/** A JSON value as a google.protobuf.Value. */
export function jsonToValue(j: JsonValue): Value {
  return fromJson(ValueSchema, j);
}

/** JSON text of a value, for the `*_json` fields. `undefined` is refused: it has no JSON text. */
export function jsonText(v: JsonValue): string {
  const text = JSON.stringify(v);
  if (text === undefined) throw new TypeError("historyd: a JSON field cannot be undefined");
  return text;
}

/** Parses the JSON text of a `*_json` field; undefined stays undefined (absent = null on the wire
 * where the field says so, but the caller sees that the field was not set). */
export function parseJSON(text: string | undefined): JsonValue | undefined {
  return text === undefined ? undefined : (JSON.parse(text) as JsonValue);
}

/**
 * The content of a base message (the Exchange's `generic` content) as the JSON value it holds: null
 * when it has none, undefined when the message is of a typed kind (read those through
 * `message.content`, a typed oneof: `if (m.content.case === "instruction") m.content.value...`).
 */
export function genericContent(m: Message): JsonValue | undefined {
  if (m.content.case !== "generic") return undefined;
  return parseJSON(m.content.value.contentJson) ?? null;
}
