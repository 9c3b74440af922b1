// Runs pool/1 receipts through @auth0/cose, a COSE implementation that never heard of Pool
// (tests/interop). Reads one JSON request on standard input, writes one JSON answer.
//
//   {"op": "verify", "public_key": HEX, "entries": [HEX, ...]}
//     -> {"results": [{"verified": true, "alg": -8, "kid": HEX, "unprotected": 0,
//                      "payload": HEX} | {"verified": false, "error": TEXT}, ...]}
//   {"op": "sign", "seed": HEX, "public_key": HEX, "kid": HEX, "payload": HEX}
//     -> {"envelope": HEX}   (@auth0/cose's own encoding of a COSE_Sign1 with protected
//                             {1: -8, 4: kid} and an empty unprotected map)
//
// Keys reach @auth0/cose as Node.js KeyObjects made from JWKs (RFC 8037: OKP, Ed25519).
import { createPrivateKey, createPublicKey } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { Sign1 } from '@auth0/cose'

const HEADER_ALG = 1
const HEADER_KID = 4
const ALG_EDDSA = -8

const bytes = (hex) => new Uint8Array(Buffer.from(hex, 'hex'))
const hex = (data) => Buffer.from(data).toString('hex')
const b64url = (h) => Buffer.from(h, 'hex').toString('base64url')

function publicKey(publicHex) {
  return createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: b64url(publicHex) }, format: 'jwk' })
}

async function verify(request) {
  const key = publicKey(request.public_key)
  const results = []
  for (const entry of request.entries) {
    try {
      const msg = Sign1.decode(bytes(entry))
      await msg.verify(key, { algorithms: [ALG_EDDSA] })
      results.push({
        verified: true,
        alg: msg.protectedHeaders.get(HEADER_ALG),
        kid: hex(msg.protectedHeaders.get(HEADER_KID)),
        unprotected: msg.unprotectedHeaders.size,
        payload: hex(msg.payload)
      })
    } catch (err) {
      results.push({ verified: false, error: `${err.name}: ${err.message}` })
    }
  }
  return { results }
}

async function sign(request) {
  const key = createPrivateKey({
    key: { kty: 'OKP', crv: 'Ed25519', d: b64url(request.seed), x: b64url(request.public_key) },
    format: 'jwk'
  })
  const protectedHeaders = new Map([[HEADER_ALG, ALG_EDDSA], [HEADER_KID, bytes(request.kid)]])
  const msg = await Sign1.sign(protectedHeaders, new Map(), bytes(request.payload), key)
  return { envelope: hex(msg.encode()) }
}

const request = JSON.parse(readFileSync(0, 'utf8'))
const ops = { verify, sign }
if (!(request.op in ops)) {
  process.stderr.write(`unknown op ${request.op}\n`)
  process.exit(2)
}
process.stdout.write(JSON.stringify(await ops[request.op](request)) + '\n')
