// A branch: LionAGI's Branch calls (add_message's factory inputs, the typed views, to_chat_msg,
// to_dict) over HistoryService, with JSON values in and out.

import type { HistorydClient } from "./client.js";
import type { Message } from "./gen/historyd/v1/envelope_pb.js";
import {
  type Branch as BranchInfo,
  ContextMode,
  type EventKind,
  MessageView,
  SerializationMode,
} from "./gen/historyd/v1/history_service_pb.js";
import { type JsonObject, type JsonValue, type Participant, jsonText, participantValue } from "./json.js";
import { BranchWatch, type WatchOptions } from "./watch.js";

export { ContextMode, MessageView, SerializationMode };
export type { BranchInfo, EventKind };

/** Options every call takes. */
export interface CallOptions {
  /** Aborts the call. */
  signal?: AbortSignal;
}

/** Options of a write. */
export interface WriteOptions extends CallOptions {
  /** The idempotency key; the client makes one when absent, and a retry reuses it. */
  requestId?: string;
  /** The branch's head the write expects (optimistic concurrency); FAILED_PRECONDITION otherwise. */
  expectedHead?: bigint;
  /** Ask for the written message's `rendered` field (writes do not render by default). */
  includeRendered?: boolean;
}

/** Options of a written message's routing. */
export interface RoutingOptions {
  /** The sender: a string, null (an explicit None) or undefined (absent: None as well). */
  sender?: Participant;
  /** The recipient, like sender. */
  recipient?: Participant;
  /** Merged into the message's metadata.extra (add_message(metadata=)). */
  metadata?: JsonObject;
}

/** Options of createBranch. */
export interface CreateBranchOptions extends CallOptions {
  /** The new branch's id; the server makes one when absent. */
  id?: string;
  /** The System's text; `""` is LionAGI's default text; absent gives the branch no System. */
  system?: string;
  /** `true` stamps the System with the current UTC minute; a string is kept verbatim. */
  systemDatetime?: true | string;
  /** The System's sender; default: user, else "system". */
  systemSender?: string;
  user?: string;
  name?: string;
  metadata?: JsonObject;
  requestId?: string;
}

/** Options of importBranch. */
export interface ImportOptions extends CallOptions {
  /** The new branch's id instead of the payload's. */
  id?: string;
  /** A server-made id whatever the payload says. */
  newId?: boolean;
  /** The metadata key of a db-mode payload written with a custom one; a key that names a field of
   * the dicts (id, messages, chat_model, ...) is refused, INVALID_ARGUMENT. */
  dbMetaKey?: string;
  requestId?: string;
}

/** Options of addInstruction. */
export interface InstructionOptions extends WriteOptions, RoutingOptions {
  /** The guidance: text, or any JSON value. */
  guidance?: JsonValue;
  /** The context: an array is a list of items, anything else one item (LionAGI's context=). */
  context?: JsonValue;
  /** How context joins an existing one (for an update through targetId). */
  handleContext?: ContextMode;
  /** An existing Instruction of the branch to update in place (add_message(instruction=<it>)). */
  targetId?: string;
  /** Replaces the structured rendering when non-empty. */
  plainContent?: string;
  /** Tool schemas (a `{"tools": [...]}` wrapper is unwrapped). */
  toolSchemas?: JsonValue[];
  /** A dictionary response format. */
  responseFormat?: JsonObject;
  /** Image references: http(s) URLs, data URIs or raw base64. */
  images?: string[];
  imageDetail?: "low" | "high" | "auto";
}

/** One page-walking read of messages. */
export interface MessagesOptions extends CallOptions {
  /** A typed view (instructions, assistant responses, actions, ...). */
  view?: MessageView;
  /** Newest first. */
  descending?: boolean;
  /** The selected progression (the full order when none is set). */
  selected?: boolean;
  /** Messages per page (the server's default 50, at most 1000). */
  pageSize?: number;
}

/** A chat message as a model's API takes it: {role, content}, content text or a list of parts. */
export interface ChatMessageJSON {
  role: string;
  /** Text, the list of parts (`{type, text}` or `{type, image_url: {url, detail}}`), the JSON value
   * of a rendering that is not text (content_json, parsed: an AssistantResponse whose value is not a
   * string, an Instruction whose plain_content is not text), or null when the message could not be
   * rendered (renderError says why). */
  content: JsonValue;
  /** The projected message's id. */
  id: string;
  /** Why rendering failed; absent when it succeeded. */
  renderError?: string;
}

/** A branch of historyd. Methods make calls; `id` is all the handle holds. */
export class Branch {
  constructor(
    readonly client: HistorydClient,
    readonly id: string,
    /** The branch as the call that made this handle returned it, when one did. */
    readonly info?: BranchInfo,
  ) {}

  /** Adds an Instruction (add_message(instruction=..., context=..., guidance=...)). */
  async addInstruction(instruction: JsonValue | undefined, options: InstructionOptions = {}): Promise<Message> {
    const context = options.context === undefined ? [] : Array.isArray(options.context) ? options.context : [options.context];
    return this.#add(options, {
      case: "instruction",
      value: {
        instructionValue:
          instruction === undefined
            ? { case: undefined }
            : typeof instruction === "string"
              ? { case: "instruction", value: instruction }
              : { case: "instructionJson", value: jsonText(instruction) },
        guidanceValue:
          options.guidance === undefined
            ? { case: undefined }
            : typeof options.guidance === "string"
              ? { case: "guidance", value: options.guidance }
              : { case: "guidanceJson", value: jsonText(options.guidance) },
        contextJson: context.map(jsonText),
        handleContext: options.handleContext ?? ContextMode.UNSPECIFIED,
        plainContent: options.plainContent,
        toolSchemasJson: (options.toolSchemas ?? []).map(jsonText),
        responseFormatJson: options.responseFormat === undefined ? undefined : jsonText(options.responseFormat),
        images: options.images ?? [],
        imageDetail: options.imageDetail,
      },
    });
  }

  /** Adds an AssistantResponse: display text, or `{raw}` a provider's raw response (OpenAI chat,
   * Anthropic messages, ...) from which the server takes the text and which it keeps in
   * metadata.model_response. */
  async addAssistantResponse(response: string | { raw: JsonValue }, options: WriteOptions & RoutingOptions = {}): Promise<Message> {
    return this.#add(options, {
      case: "assistantResponse",
      value: {
        response: typeof response === "string" ? { case: "text", value: response } : { case: "rawResponseJson", value: jsonText(response.raw) },
      },
    });
  }

  /** Adds an ActionRequest for `fn` with its arguments. */
  async addActionRequest(fn: string, args: JsonObject = {}, options: WriteOptions & RoutingOptions = {}): Promise<Message> {
    return this.#add(options, { case: "actionRequest", value: { function: fn, argumentsJson: jsonText(args) } });
  }

  /** Answers an ActionRequest (the message or its id) with the function's output (any JSON value;
   * `error` for a failure): one commit writes the ActionResponse and sets the request's
   * action_response_id. Returns the ActionResponse. */
  async respond(
    request: Message | string,
    output: JsonValue | undefined,
    options: WriteOptions & Omit<RoutingOptions, "metadata"> & { error?: string } = {},
  ): Promise<Message> {
    const resp = await this.client.history.createActionResponse(
      {
        branchId: this.id,
        requestId: options.requestId ?? "",
        expectedHeadSequence: options.expectedHead,
        actionRequestId: typeof request === "string" ? request : request.id,
        outputJson: output === undefined ? undefined : jsonText(output),
        error: options.error,
        sender: participantValue(options.sender),
        recipient: participantValue(options.recipient),
        includeRendered: options.includeRendered ?? false,
      },
      this.client.callOptions(options.signal),
    );
    return resp.actionResponse!;
  }

  /** Sets the branch's System (LionAGI's default text for `""`). */
  async setSystem(system: string, options: WriteOptions & { systemDatetime?: true | string } = {}): Promise<Message> {
    return this.#add(options, {
      case: "system",
      value: {
        systemMessage: system,
        systemDatetime:
          options.systemDatetime === undefined
            ? { case: undefined }
            : options.systemDatetime === true
              ? { case: "datetimeNow", value: true }
              : { case: "datetimeText", value: options.systemDatetime },
      },
    });
  }

  /** The branch's messages, page after page (ListMessages), as one async iterable. */
  async *messages(options: MessagesOptions = {}): AsyncIterable<Message> {
    let pageToken = "";
    do {
      const page = await this.client.history.listMessages(
        {
          branchId: this.id,
          pageSize: options.pageSize ?? 0,
          pageToken,
          descending: options.descending ?? false,
          view: options.view ?? MessageView.UNSPECIFIED,
          selected: options.selected ?? false,
        },
        this.client.callOptions(options.signal),
      );
      yield* page.messages;
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
  }

  /** The last message of a view (last_instruction, last_response), undefined when it is empty. */
  async last(view: MessageView = MessageView.UNSPECIFIED, options: CallOptions = {}): Promise<Message | undefined> {
    const resp = await this.client.history.getLastMessage({ branchId: this.id, view }, this.client.callOptions(options.signal));
    return resp.message;
  }

  /** One message by id. */
  async get(messageId: string, options: CallOptions = {}): Promise<Message> {
    const resp = await this.client.history.getMessage({ branchId: this.id, messageId }, this.client.callOptions(options.signal));
    return resp.message!;
  }

  /** The prompt: LionAGI's chat_msg of each message, as {role, content} values. `order` projects
   * the given ids (an empty array: nothing); `selected` the selected progression. */
  async toChatMessages(options: CallOptions & { order?: string[]; selected?: boolean } = {}): Promise<ChatMessageJSON[]> {
    const resp = await this.client.history.toChatMessages(
      { branchId: this.id, order: options.order === undefined ? undefined : { ids: options.order }, selected: options.selected ?? false },
      this.client.callOptions(options.signal),
    );
    return resp.messages.map((m, i) => {
      const out: ChatMessageJSON = { role: m.role, content: null, id: resp.messageIds[i] ?? "" };
      if (m.content.case === "text") out.content = m.content.value;
      if (m.content.case === "contentJson") out.content = JSON.parse(m.content.value) as JsonValue;
      if (m.content.case === "parts") {
        out.content = m.content.value.parts.map(
          (p): JsonObject =>
            p.imageUrl !== undefined ? { type: p.type, image_url: { url: p.imageUrl.url, detail: p.imageUrl.detail } } : { type: p.type, text: p.text },
        );
      }
      const renderError = resp.renderErrors[i];
      if (renderError) out.renderError = renderError;
      return out;
    });
  }

  /** The branch as LionAGI's Branch.to_dict, a JSON value (mode: json, python or db; dbMetaKey is db
   * mode's metadata key, default node_metadata, and one that names a field of the dicts is refused,
   * INVALID_ARGUMENT). */
  async export(options: CallOptions & { mode?: SerializationMode; dbMetaKey?: string } = {}): Promise<JsonObject> {
    const resp = await this.client.history.exportBranch(
      { branchId: this.id, mode: options.mode ?? SerializationMode.UNSPECIFIED, dbMetaKey: options.dbMetaKey ?? "" },
      this.client.callOptions(options.signal),
    );
    return JSON.parse(resp.data) as JsonObject;
  }

  /** The branch's description (GetBranch). */
  async describe(options: CallOptions = {}): Promise<BranchInfo> {
    const resp = await this.client.history.getBranch({ branchId: this.id }, this.client.callOptions(options.signal));
    return resp.branch!;
  }

  /** Deletes the branch. */
  async delete(options: WriteOptions = {}): Promise<void> {
    await this.client.history.deleteBranch(
      { branchId: this.id, requestId: options.requestId ?? "", expectedHeadSequence: options.expectedHead },
      this.client.callOptions(options.signal),
    );
  }

  /**
   * Watches the branch: an async iterable of commits (and heartbeats when asked) that resumes from
   * its cursor after a disconnect, so every event arrives once and in order. It ends by `close()`,
   * a `break` out of the loop, or an error: HistoryCompactedError when the cursor is gone,
   * BranchDeletedError after the branch's BRANCH_DELETED commit (even when the connection drops
   * before the stream's own end: the watch does not resume after a deletion).
   */
  watch(options: WatchOptions = {}): BranchWatch {
    return new BranchWatch(this.client, this.id, options);
  }

  async #add(options: WriteOptions & RoutingOptions, input: AddInput): Promise<Message> {
    const resp = await this.client.history.addMessage(
      {
        branchId: this.id,
        requestId: options.requestId ?? "",
        expectedHeadSequence: options.expectedHead,
        sender: participantValue(options.sender),
        recipient: participantValue(options.recipient),
        metadata: options.metadata,
        targetId: (options as InstructionOptions).targetId ?? "",
        includeRendered: options.includeRendered ?? false,
        input,
      },
      this.client.callOptions(options.signal),
    );
    return resp.message!;
  }
}

type AddInput = NonNullable<Parameters<HistorydClient["history"]["addMessage"]>[0]>["input"];
