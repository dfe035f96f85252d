// A real OpenID provider for the single sign-on tests: panva's oidc-provider (a certified implementation).
//
// Configured from one JSON file named by OIDC_CONFIG: { port, issuer, keys: [private JWKs], clients: [...],
// claims_in_userinfo?: bool }.
// Back-channel logout is on: signing out at /session/end posts a logout token to each client's
// backchannel_logout_uri before the provider answers.
// Accounts are set over HTTP by the test (POST /_test/accounts {"<sub>": {claims}}), read afresh at every
// login, so a test can take a group away between two logins. The interaction page signs in the account its
// `account` query parameter names (tests drive it over HTTP) or shows a one-field form (a browser fills it).
import http from "node:http";
import fs from "node:fs";
import Provider from "oidc-provider";

const config = JSON.parse(fs.readFileSync(process.env.OIDC_CONFIG, "utf8"));
const accounts = {};

const provider = new Provider(config.issuer, {
  clients: config.clients,
  jwks: { keys: config.keys },
  pkce: { required: () => true },
  scopes: ["openid", "profile", "email", "groups"],
  claims: {
    openid: ["sub"],
    profile: ["preferred_username", "name"],
    email: ["email", "email_verified"],
    groups: ["groups"],
  },
  // false: scope claims go in the ID token, as Okta and Keycloak can be told to do; with claims_in_userinfo
  // they are only in the UserInfo response (the ID token has sub and no profile, email or groups).
  conformIdTokenClaims: Boolean(config.claims_in_userinfo),
  findAccount: async (ctx, id) =>
    accounts[id] === undefined ? undefined : { accountId: id, claims: async () => ({ sub: id, ...accounts[id] }) },
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  features: {
    devInteractions: { enabled: false },
    rpInitiatedLogout: { enabled: true },
    // A client registered with backchannel_logout_uri is sent a logout token when its person signs out here.
    backchannelLogout: { enabled: true },
  },
  // The relying party under test listens on loopback, which oidc-provider's SSRF guard (its fetch dispatcher)
  // refuses; tests only, where both ends are on this machine. Its 2.5 s limit on a request is lifted to 30 s:
  // a back-channel logout post to a live server on a loaded test machine can take longer, and the provider
  // drops a failed one silently (the test would then see the person still signed in).
  fetch: (url, options) => {
    delete options.dispatcher;
    options.signal = AbortSignal.timeout(30000);
    return globalThis.fetch(url, options);
  },
  cookies: { keys: ["toolgate-tests-only"] },
  ttl: { IdToken: config.id_token_ttl || 3600 },
});
provider.proxy = false;

function escape(text) {
  return String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

async function interaction(req, res, url) {
  const details = await provider.interactionDetails(req, res);
  const account = url.searchParams.get("account");
  if (!account) {
    res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
    res.end(
      `<!doctype html><title>Test IdP sign-in</title><h1>Test IdP</h1>` +
        `<form method="get" action="/interaction/${escape(details.uid)}">` +
        `<label>Account <input name="account" id="account"></label> <button type="submit">Sign in</button></form>`,
    );
    return;
  }
  if (accounts[account] === undefined) {
    await provider.interactionFinished(req, res, { error: "access_denied", error_description: "no such account" });
    return;
  }
  const grant = new provider.Grant({ accountId: account, clientId: details.params.client_id });
  grant.addOIDCScope(details.params.scope);
  const grantId = await grant.save();
  await provider.interactionFinished(req, res, { login: { accountId: account }, consent: { grantId } });
}

const handler = provider.callback();
const server = http.createServer(async (req, res) => {
  const url = new URL(req.url, config.issuer);
  try {
    if (req.method === "POST" && url.pathname === "/_test/accounts") {
      let body = "";
      for await (const chunk of req) body += chunk;
      Object.assign(accounts, JSON.parse(body));
      res.writeHead(204);
      res.end();
    } else if (url.pathname.startsWith("/interaction/")) {
      await interaction(req, res, url);
    } else {
      handler(req, res);
    }
  } catch (error) {
    res.writeHead(500, { "content-type": "text/plain" });
    res.end(String(error));
  }
});
server.listen(config.port, "127.0.0.1", () => console.log(`ready ${config.issuer}`));
