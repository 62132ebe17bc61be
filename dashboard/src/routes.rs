//! The HTTP side: the pages and their assets, sign-in and sign-out, the
//! views as JSON (`/api/view`) and as a live stream (`/api/live`). Every
//! `/api` request is answered with the reads of the user it comes from: a
//! session's (cookie) or, in proxy mode, the `Authorization` header's.

use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use serde::Deserialize;
use serde_json::json;

use crate::assets;
use crate::cluster::Cluster;
use crate::identity::{self, SignInRefused, User};
use crate::live::{self, Holder};
use crate::session::{self, Sessions};
use crate::viewer::Viewer;
use crate::views::{self, ViewError, ViewParams};

/// What every handler shares.
#[derive(Clone, Debug)]
pub struct AppState {
    /// Where the API server is.
    pub cluster: Cluster,
    /// Signed-in users.
    pub sessions: Sessions,
    /// Proxy mode: users known by their forwarded token (`None`: off).
    pub proxied: Option<Sessions>,
    /// How often a live page is re-read.
    pub refresh: Duration,
    /// Whether cookies are marked `Secure` (served behind HTTPS).
    pub secure_cookie: bool,
    /// One-time sign-in codes made in-process.
    pub tickets: crate::ticket::Tickets,
}

/// The router.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/signin", get(signin_page).post(signin))
        .route("/signin/ticket/{code}", get(signin_ticket))
        .route("/signout", post(signout))
        .route(
            "/app.js",
            get(|| async { asset("text/javascript", assets::APP_JS) }),
        )
        .route(
            "/app.css",
            get(|| async { asset("text/css", assets::APP_CSS) }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route("/api/me", get(me))
        .route("/api/view", get(view))
        .route("/api/live", get(live_view))
        .layer(axum::middleware::from_fn(security_headers))
        .with_state(state)
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// Pages run only their own script and styles, talk only to this server and
/// are never framed.
async fn security_headers(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    let set = [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        // Not `no-referrer`: with it a browser sends `Origin: null` on a form
        // post, and sign-in checks the origin.
        (header::REFERRER_POLICY, "same-origin"),
        (header::X_FRAME_OPTIONS, "DENY"),
    ];
    for (name, value) in set {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// Who a request is from, with the reads as them.
struct Caller {
    user: User,
    viewer: Viewer,
    holder: Holder,
}

/// Why a request has no caller.
enum NoCaller {
    /// Not signed in (or the proxy's token is not accepted).
    SignedOut(String),
    /// The API server could not be asked.
    Unavailable(String),
}

impl NoCaller {
    fn into_api_response(self) -> Response {
        match self {
            Self::SignedOut(why) => {
                (StatusCode::UNAUTHORIZED, Json(json!({ "error": why }))).into_response()
            }
            Self::Unavailable(why) => (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({ "error": why })),
            )
                .into_response(),
        }
    }
}

/// The bearer token of an `Authorization` header.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let token = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))?;
    Some(token.trim()).filter(|t| !t.is_empty())
}

async fn caller(state: &AppState, headers: &HeaderMap) -> Result<Caller, NoCaller> {
    if let Some(proxied) = &state.proxied
        && let Some(token) = bearer(headers)
    {
        let found = match proxied.get(token) {
            Some(s) => s,
            None => {
                let client = state
                    .cluster
                    .client_for(token)
                    .map_err(|e| NoCaller::Unavailable(e.to_string()))?;
                let user = identity::review(&client).await.map_err(|e| match e {
                    SignInRefused::BadToken(_) => NoCaller::SignedOut(e.to_string()),
                    SignInRefused::Unreachable(_) => NoCaller::Unavailable(e.to_string()),
                })?;
                proxied.keep(token, user, client);
                proxied
                    .get(token)
                    .ok_or_else(|| NoCaller::Unavailable("the proxy cache is full".into()))?
            }
        };
        let namespaces = found
            .user
            .service_account_namespace()
            .map(str::to_string)
            .into_iter()
            .collect();
        return Ok(Caller {
            viewer: Viewer {
                client: found.client,
                namespaces,
            },
            user: found.user,
            holder: Holder::Proxied,
        });
    }
    let cookies = headers
        .get(header::COOKIE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let id = session::cookie_value(cookies, session::COOKIE)
        .ok_or_else(|| NoCaller::SignedOut("not signed in".into()))?;
    let found = state
        .sessions
        .get(id)
        .ok_or_else(|| NoCaller::SignedOut("the session ended; sign in again".into()))?;
    Ok(Caller {
        viewer: Viewer {
            client: found.client,
            namespaces: found.namespaces,
        },
        user: found.user,
        holder: Holder::Session(state.sessions.clone(), id.to_string()),
    })
}

async fn index(State(state): State<AppState>, headers: HeaderMap) -> Response {
    match caller(&state, &headers).await {
        Ok(_) => asset("text/html; charset=utf-8", assets::INDEX_HTML),
        Err(_) => Redirect::to("/signin").into_response(),
    }
}

async fn signin_page() -> Response {
    asset_page(StatusCode::OK, "")
}

/// The sign-in page with `message` (escaped) shown above the form.
fn asset_page(code: StatusCode, message: &str) -> Response {
    let body = assets::SIGNIN_HTML.replace("{{message}}", &assets::escape(message));
    (
        code,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        body,
    )
        .into_response()
}

/// The sign-in form.
#[derive(Debug, Deserialize)]
struct SignIn {
    token: String,
    #[serde(default)]
    namespaces: String,
}

/// A one-time link: its token signs in as the form would.
async fn signin_ticket(
    State(state): State<AppState>,
    axum::extract::Path(code): axum::extract::Path<String>,
) -> Response {
    match state.tickets.redeem(&code) {
        Some(token) => open_session(&state, &token, String::new()).await,
        None => asset_page(
            StatusCode::UNAUTHORIZED,
            "This sign-in link was used already or has expired: sign in with a token.",
        ),
    }
}

async fn signin(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<SignIn>,
) -> Response {
    // SameSite cookies do not stop another site from posting its own token
    // here (signing the visitor in as someone else): a browser's form post
    // names its origin, which must be this server.
    if !same_origin(&headers) {
        return asset_page(
            StatusCode::FORBIDDEN,
            "Sign-in refused: the form came from another site.",
        );
    }
    open_session(&state, &form.token, form.namespaces).await
}

/// Whether a request's `Origin` (when the browser sends one) is the server
/// it was sent to (its `Host`).
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let authority = origin.split_once("://").map_or(origin, |(_, rest)| rest);
    !host.is_empty() && authority == host
}

/// Checks `token` with the API server and opens a session for its user
/// (with `namespaces`, comma- or space-separated, to look into).
async fn open_session(state: &AppState, token: &str, namespaces: String) -> Response {
    let token = token.trim();
    if token.is_empty() {
        return asset_page(
            StatusCode::UNAUTHORIZED,
            "Sign-in refused: no token was given.",
        );
    }
    let client = match state.cluster.client_for(token) {
        Ok(c) => c,
        Err(e) => return asset_page(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    };
    let user = match identity::review(&client).await {
        Ok(user) => user,
        Err(e @ SignInRefused::BadToken(_)) => {
            tracing::info!(error = %e, "sign-in refused");
            return asset_page(StatusCode::UNAUTHORIZED, &format!("Sign-in refused: {e}"));
        }
        Err(e) => return asset_page(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    };
    let mut namespaces: Vec<String> = namespaces
        .split([',', ' '])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    if let Some(own) = user.service_account_namespace()
        && !namespaces.iter().any(|n| n == own)
    {
        namespaces.insert(0, own.to_string());
    }
    tracing::info!(user = %user.name, "signed in");
    match state.sessions.open(user, client, namespaces) {
        Ok(id) => {
            let cookie = session::set_cookie(&id, state.sessions.lifetime(), state.secure_cookie);
            ([(header::SET_COOKIE, cookie)], Redirect::to("/")).into_response()
        }
        Err(e) => asset_page(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
}

async fn signout(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if !same_origin(&headers) {
        return (StatusCode::FORBIDDEN, "sign-out from another site").into_response();
    }
    let cookies = headers
        .get(header::COOKIE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if let Some(id) = session::cookie_value(cookies, session::COOKIE) {
        state.sessions.close(id);
    }
    let cookie = session::set_cookie("", Duration::ZERO, state.secure_cookie);
    ([(header::SET_COOKIE, cookie)], Redirect::to("/signin")).into_response()
}

async fn me(State(state): State<AppState>, headers: HeaderMap) -> Response {
    match caller(&state, &headers).await {
        Ok(c) => Json(json!({
            "user": c.user.name, "groups": c.user.groups, "namespaces": c.viewer.namespaces,
            "proxied": matches!(c.holder, Holder::Proxied),
            "refreshSeconds": state.refresh.as_secs_f64(),
        }))
        .into_response(),
        Err(e) => e.into_api_response(),
    }
}

async fn view(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(params): Query<ViewParams>,
) -> Response {
    let c = match caller(&state, &headers).await {
        Ok(c) => c,
        Err(e) => return e.into_api_response(),
    };
    match views::build(&c.viewer, &params).await {
        Ok(view) => Json(view).into_response(),
        Err(ViewError::BadRequest(why)) => {
            (StatusCode::BAD_REQUEST, Json(json!({ "error": why }))).into_response()
        }
        Err(ViewError::Read(crate::reads::ReadError::Forbidden(why))) => (
            StatusCode::FORBIDDEN,
            Json(json!({ "error": format!("not allowed: {why}") })),
        )
            .into_response(),
        Err(ViewError::Read(crate::reads::ReadError::NotFound(why))) => {
            (StatusCode::NOT_FOUND, Json(json!({ "error": why }))).into_response()
        }
        Err(ViewError::Read(e)) => (
            StatusCode::BAD_GATEWAY,
            Json(json!({ "error": e.to_string() })),
        )
            .into_response(),
    }
}

async fn live_view(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(params): Query<ViewParams>,
) -> Response {
    match caller(&state, &headers).await {
        Ok(c) => live::stream(c.viewer, params, c.holder, state.refresh).into_response(),
        Err(e) => e.into_api_response(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| (k.clone(), HeaderValue::from_str(v).unwrap()))
            .collect()
    }

    #[test]
    fn a_form_from_another_site_is_not_this_servers() {
        let host = (header::HOST, "127.0.0.1:8080");
        assert!(
            same_origin(&headers(std::slice::from_ref(&host))),
            "no Origin: not a cross-site form"
        );
        assert!(same_origin(&headers(&[
            host.clone(),
            (header::ORIGIN, "http://127.0.0.1:8080")
        ])));
        assert!(!same_origin(&headers(&[
            host,
            (header::ORIGIN, "http://evil.example")
        ])));
        assert!(!same_origin(&headers(&[(
            header::ORIGIN,
            "http://127.0.0.1:8080"
        )])));
    }

    #[test]
    fn a_bearer_header_gives_its_token() {
        let h = headers(&[(header::AUTHORIZATION, "Bearer abc ")]);
        assert_eq!(bearer(&h), Some("abc"));
        assert_eq!(
            bearer(&headers(&[(header::AUTHORIZATION, "Basic abc")])),
            None
        );
        assert_eq!(
            bearer(&headers(&[(header::AUTHORIZATION, "Bearer ")])),
            None
        );
    }
}
