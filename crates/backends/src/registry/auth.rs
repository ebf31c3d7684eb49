//! Answering a registry's authentication challenge: Basic, a bearer token from the challenge's
//! realm, or an identity token exchanged for an access token.

use std::collections::HashMap;

/// The most a token service's answer may hold (a token is a few KiB at most).
pub(super) const MAX_TOKEN_BYTES: usize = 64 * 1024;

use reqwest::header::WWW_AUTHENTICATE;
use reqwest::{Method, StatusCode, Url};

use super::client::Body;
use super::{RegistryClient, RegistryError};
use crate::credentials::Credentials;

enum Challenge {
    Basic,
    Bearer {
        realm: String,
        service: Option<String>,
        scope: Option<String>,
    },
}

fn parse_challenge(header: &str) -> Option<Challenge> {
    let (scheme, params) = header.trim().split_once(' ').unwrap_or((header.trim(), ""));
    if scheme.eq_ignore_ascii_case("basic") {
        return Some(Challenge::Basic);
    }
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let mut values: HashMap<String, String> = HashMap::new();
    let mut rest = params;
    while let Some((key, after)) = rest.split_once('=') {
        let key = key.trim().trim_start_matches(',').trim().to_lowercase();
        let (value, next) = if let Some(quoted) = after.strip_prefix('"') {
            let end = quoted.find('"').unwrap_or(quoted.len());
            (&quoted[..end], quoted.get(end + 1..).unwrap_or(""))
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        values.insert(key, value.to_string());
        rest = next;
    }
    Some(Challenge::Bearer {
        realm: values.remove("realm")?,
        service: values.remove("service"),
        scope: values.remove("scope"),
    })
}

impl RegistryClient {
    /// Send, answering one authentication challenge (basic, or a bearer token from the challenge's realm).
    pub(super) async fn send_at(
        &self,
        method: Method,
        url: &str,
        scope: &str,
        what: &str,
        body: Option<&Body>,
    ) -> Result<reqwest::Response, RegistryError> {
        let cached = self.tokens.lock().ok().and_then(|t| t.get(scope).cloned());
        let mut first = self.request_with(&method, url, body);
        if let Some(token) = &cached {
            first = first.bearer_auth(token);
        }
        let response = first.send().await.map_err(|e| self.http_error(what, e))?;
        if response.status() != StatusCode::UNAUTHORIZED {
            return Ok(response);
        }
        // Every challenge the registry offers (one WWW-Authenticate header each); a token flow is
        // preferred over basic, as Docker's auth handlers are ordered.
        let challenges: Vec<Challenge> = response
            .headers()
            .get_all(WWW_AUTHENTICATE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .filter_map(parse_challenge)
            .collect();
        let challenge = challenges
            .iter()
            .position(|c| matches!(c, Challenge::Bearer { .. }))
            .or(if challenges.is_empty() { None } else { Some(0) })
            .map(|i| challenges.into_iter().nth(i));
        let challenge = challenge.flatten();
        let unauthorized = |message: &str| RegistryError::Unauthorized {
            host: self.host.clone(),
            what: what.to_string(),
            message: message.to_string(),
        };
        let retry = match challenge {
            Some(Challenge::Basic) => match &self.creds {
                Some(Credentials::Basic { username, password }) => self
                    .request_with(&method, url, body)
                    .basic_auth(username, Some(password)),
                _ => {
                    return Err(unauthorized(
                        "it asks for a user name and password and none are configured",
                    ));
                }
            },
            Some(Challenge::Bearer {
                realm,
                service,
                scope: challenged,
            }) => {
                let scope_wanted = challenged.unwrap_or_else(|| scope.to_string());
                let token = self
                    .token(&realm, service.as_deref(), &scope_wanted, what)
                    .await?;
                if let Ok(mut tokens) = self.tokens.lock() {
                    tokens.insert(scope.to_string(), token.clone());
                }
                self.request_with(&method, url, body).bearer_auth(token)
            }
            None => {
                return Err(unauthorized(
                    "it answered 401 without a usable WWW-Authenticate challenge",
                ));
            }
        };
        let response = retry.send().await.map_err(|e| self.http_error(what, e))?;
        if response.status() == StatusCode::UNAUTHORIZED {
            return Err(unauthorized("the credentials were not accepted"));
        }
        Ok(response)
    }

    async fn token(
        &self,
        realm: &str,
        service: Option<&str>,
        scope: &str,
        what: &str,
    ) -> Result<String, RegistryError> {
        let mut url = Url::parse(realm).map_err(|e| RegistryError::Unauthorized {
            host: self.host.clone(),
            what: what.to_string(),
            message: format!("its token realm {realm:?} is not a URL ({e})"),
        })?;
        if let Some(Credentials::IdentityToken(refresh)) = &self.creds {
            return self.oauth_token(url, refresh, service, scope, what).await;
        }
        {
            let mut query = url.query_pairs_mut();
            if let Some(service) = service {
                query.append_pair("service", service);
            }
            query.append_pair("scope", scope);
        }
        let mut request = self.https.get(url);
        if let Some(Credentials::Basic { username, password }) = &self.creds {
            request = request.basic_auth(username, Some(password));
        }
        let response = request
            .send()
            .await
            .map_err(|e| self.http_error("its token service", e))?;
        self.token_answer(response, what, ["token", "access_token"], |status| {
            format!("its token service answered {status}")
        })
        .await
    }

    /// The token in a token service's answer (the first of `keys` it has), or why there is none.
    async fn token_answer(
        &self,
        response: reqwest::Response,
        what: &str,
        keys: [&str; 2],
        refused: impl FnOnce(reqwest::StatusCode) -> String,
    ) -> Result<String, RegistryError> {
        let unauthorized = |message: String| RegistryError::Unauthorized {
            host: self.host.clone(),
            what: what.to_string(),
            message,
        };
        let status = response.status();
        if !status.is_success() {
            return Err(unauthorized(refused(status)));
        }
        let bytes = self
            .read_bounded(response, "its token service's answer", MAX_TOKEN_BYTES)
            .await?;
        let body: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|e| RegistryError::Garbage {
                host: self.host.clone(),
                what: "its token service's answer".into(),
                message: format!("it is not JSON ({e})"),
            })?;
        keys.iter()
            .find_map(|key| body.get(*key).and_then(|t| t.as_str()))
            .map(str::to_string)
            .ok_or_else(|| {
                unauthorized(format!("its token service answered without `{}`", keys[0]))
            })
    }
}

impl RegistryClient {
    /// Exchange an identity token (what `docker login` keeps for registries that issue one) for an access
    /// token: a POST to the realm with `grant_type=refresh_token` (distribution's `docs/spec/auth/oauth.md`;
    /// Docker's `registry/client/auth/session.go` fetchTokenWithOAuth).
    async fn oauth_token(
        &self,
        mut url: Url,
        refresh: &str,
        service: Option<&str>,
        scope: &str,
        what: &str,
    ) -> Result<String, RegistryError> {
        url.set_query(None);
        let mut form = Url::parse("http://form.invalid/").map_err(|e| RegistryError::Client {
            host: self.host.clone(),
            message: e.to_string(),
        })?;
        {
            let mut pairs = form.query_pairs_mut();
            pairs.append_pair("grant_type", "refresh_token");
            pairs.append_pair("refresh_token", refresh);
            if let Some(service) = service {
                pairs.append_pair("service", service);
            }
            pairs.append_pair("scope", scope);
            pairs.append_pair("client_id", "meshtop");
        }
        let body = form.query().unwrap_or_default().to_string();
        let response = self
            .https
            .post(url)
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(body)
            .send()
            .await
            .map_err(|e| self.http_error("its token service", e))?;
        self.token_answer(response, what, ["access_token", "token"], |status| {
            format!("its token service refused the identity token ({status})")
        })
        .await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn bearer_challenges_parse() {
        let c = parse_challenge(
            r#"Bearer realm="http://127.0.0.1:1/token",service="reg",scope="repository:a/b:pull""#,
        );
        let Some(Challenge::Bearer {
            realm,
            service,
            scope,
        }) = c
        else {
            panic!("not bearer")
        };
        assert_eq!(realm, "http://127.0.0.1:1/token");
        assert_eq!(service.as_deref(), Some("reg"));
        assert_eq!(scope.as_deref(), Some("repository:a/b:pull"));
        assert!(matches!(
            parse_challenge("Basic realm=\"r\""),
            Some(Challenge::Basic)
        ));
    }
}
