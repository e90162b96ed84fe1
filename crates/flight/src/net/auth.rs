//! Bearer-token authentication shared by the worker and `serve`: every call carries
//! `authorization: Bearer <token>`, or the client performs a Flight `Handshake` first (token as
//! the basic-auth password or as the payload) and gets the bearer header back.

use std::pin::Pin;

use arrow_flight::{HandshakeRequest, HandshakeResponse};
use base64::Engine as _;
use bytes::Bytes;
use futures::Stream;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status, Streaming};

use shapfusion_core::error::{Error, Result};

/// Marks the token in a user agent: `shapfusion-token=<token>` (what Ballista's Flight channels
/// carry, since they take no extra headers).
pub const TOKEN_AGENT_PREFIX: &str = "shapfusion-token=";

/// The reply stream type of `Handshake`.
pub type HandshakeStream = Pin<Box<dyn Stream<Item = std::result::Result<HandshakeResponse, Status>> + Send + 'static>>;

/// The bearer token in an `authorization` header, if any.
pub fn bearer_token(metadata: &MetadataMap) -> Option<&str> {
    let value = metadata.get("authorization")?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Compares a presented token with the configured one in time independent of where they differ.
pub fn token_matches(presented: &str, expected: &str) -> bool {
    let (a, b) = (presented.as_bytes(), expected.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Reads a token file: the first line, trimmed; an empty file is an error.
pub fn read_token_file(path: &std::path::Path) -> Result<String> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let token = text.lines().next().unwrap_or("").trim().to_string();
    if token.is_empty() {
        return Err(Error::InvalidArgument(format!("{}: the token file is empty", path.display())));
    }
    Ok(token)
}

/// The token in a `user-agent` header (`… shapfusion-token=<token> …`): how Ballista's own
/// channels, which take no extra headers, carry it (see `shapfusion_ballista::client`).
pub fn agent_token(metadata: &MetadataMap) -> Option<&str> {
    let agent = metadata.get("user-agent")?.to_str().ok()?;
    let start = agent.find(TOKEN_AGENT_PREFIX)? + TOKEN_AGENT_PREFIX.len();
    agent[start..].split_whitespace().next()
}

/// Refuses a call that lacks the expected bearer token (no token configured: anyone may call).
pub fn check(metadata: &MetadataMap, expected: Option<&str>) -> std::result::Result<(), Status> {
    let Some(expected) = expected else { return Ok(()) };
    let presented = bearer_token(metadata).or_else(|| agent_token(metadata));
    match presented {
        Some(t) if token_matches(t, expected) => Ok(()),
        Some(_) => Err(Status::unauthenticated("wrong bearer token")),
        None => Err(Status::unauthenticated("a bearer token is required: send the header 'authorization: Bearer <token>' (or Handshake first)")),
    }
}

/// Serves `Handshake`: accepts the token as HTTP basic-auth password (pyarrow's
/// `authenticate_basic_token`, JDBC's user/password), as a bearer header, or as the payload,
/// and answers with the bearer header clients send on later calls.
pub async fn handshake(
    request: Request<Streaming<HandshakeRequest>>,
    expected: Option<&str>,
) -> std::result::Result<Response<HandshakeStream>, Status> {
    let basic_password = request
        .metadata()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic ").or_else(|| v.strip_prefix("basic ")))
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b.trim()).ok())
        .and_then(|raw| String::from_utf8(raw).ok())
        .map(|userpass| userpass.split_once(':').map(|(_, p)| p.to_string()).unwrap_or(userpass));
    let bearer = bearer_token(request.metadata()).map(str::to_string);
    let payload = request.into_inner().message().await?.map(|m| m.payload).unwrap_or_default();
    let token = match expected {
        None => String::new(),
        Some(expected) => {
            let presented = [basic_password, bearer, Some(String::from_utf8_lossy(&payload).into_owned())];
            if !presented.iter().flatten().any(|p| token_matches(p, expected)) {
                return Err(Status::unauthenticated("handshake refused: wrong or missing token"));
            }
            expected.to_string()
        }
    };
    let reply = HandshakeResponse { protocol_version: 0, payload: Bytes::from(token.clone()) };
    let mut response = Response::new(Box::pin(futures::stream::iter([Ok(reply)])) as HandshakeStream);
    if !token.is_empty() {
        let value = format!("Bearer {token}").parse().map_err(|_| Status::internal("the token is not a valid header value"))?;
        response.metadata_mut().insert("authorization", value);
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_parsed_and_compared() {
        let mut m = MetadataMap::new();
        assert_eq!(bearer_token(&m), None);
        assert_eq!(check(&m, Some("s3cret")).unwrap_err().code(), tonic::Code::Unauthenticated);
        assert!(check(&m, None).is_ok());
        m.insert("authorization", "Bearer s3cret".parse().unwrap());
        assert_eq!(bearer_token(&m), Some("s3cret"));
        assert!(check(&m, Some("s3cret")).is_ok());
        assert!(check(&m, Some("s3creT")).unwrap_err().message().contains("wrong"));
        assert!(!token_matches("s3cre", "s3cret"));
    }

    #[test]
    fn a_token_in_the_user_agent_is_accepted() {
        let mut m = MetadataMap::new();
        m.insert("user-agent", "shapfusion-token=s3cret tonic/0.14".parse().unwrap());
        assert_eq!(agent_token(&m), Some("s3cret"));
        assert!(check(&m, Some("s3cret")).is_ok());
        assert!(check(&m, Some("other")).unwrap_err().message().contains("wrong"));
        m.insert("user-agent", "tonic/0.14".parse().unwrap());
        assert_eq!(check(&m, Some("s3cret")).unwrap_err().code(), tonic::Code::Unauthenticated);
    }
}
