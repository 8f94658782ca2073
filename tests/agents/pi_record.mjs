// pi_record.mjs — a pi extension (pi -e pi_record.mjs) that appends each
// provider payload pi builds, as one JSON line, to the file named by the
// environment's KVI_AGENTS_DUMP (tests/test_agents.c sends the first again).
// It changes nothing: the handler returns undefined, so pi sends its payload.
import { appendFileSync } from 'node:fs';

export default function (pi) {
  pi.on('before_provider_request', (event) => {
    if (process.env.KVI_AGENTS_DUMP) appendFileSync(process.env.KVI_AGENTS_DUMP, `${JSON.stringify(event.payload)}\n`);
    return undefined;
  });
}
