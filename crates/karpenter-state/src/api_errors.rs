//! The API server's answers the controllers branch on, named once (upstream's `apierrors.IsNotFound`,
//! `apierrors.IsConflict`, `client.IgnoreNotFound`).
//!
//! Each looks at the HTTP status code of a [`kube::Error::Api`] only: 404 for not found, 409 for a conflict. The
//! API server answers 409 both for a write at a stale `resourceVersion` (reason `Conflict`) and for a create of a
//! name that exists (reason `AlreadyExists`); [`is_conflict`] is true for both. Any other error (a transport
//! failure, a decode error) is neither.

/// The HTTP status code of an error the API server answered, `None` for any other error.
pub fn status_code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// The API server answered 404: the object (or its namespace) does not exist.
pub fn is_not_found(error: &kube::Error) -> bool {
    status_code(error) == Some(404)
}

/// The API server answered 409: a write at a stale `resourceVersion`, or a create of a name that exists.
pub fn is_conflict(error: &kube::Error) -> bool {
    status_code(error) == Some(409)
}

/// The API server answered 429: too many requests (for an eviction, a PodDisruptionBudget refused it).
pub fn is_too_many_requests(error: &kube::Error) -> bool {
    status_code(error) == Some(429)
}

/// A result with a 404 turned into `None`: for a write or a read whose object may be gone, where gone is fine.
pub fn ignore_not_found<T>(result: Result<T, kube::Error>) -> Result<Option<T>, kube::Error> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(Status::failure("answered", reason).with_code(code).boxed())
    }

    fn transport() -> kube::Error {
        kube::Error::LinesCodecMaxLineLengthExceeded
    }

    #[test]
    fn not_found_is_a_404_and_only_a_404() {
        assert!(is_not_found(&api(404, "NotFound")));
        assert!(is_not_found(&api(404, "")));
        assert!(!is_not_found(&api(409, "Conflict")));
        assert!(!is_not_found(&api(410, "Gone")));
        assert!(!is_not_found(&transport()));
    }

    #[test]
    fn conflict_is_a_409_whether_a_stale_version_or_an_existing_name() {
        assert!(is_conflict(&api(409, "Conflict")));
        assert!(is_conflict(&api(409, "AlreadyExists")));
        assert!(!is_conflict(&api(404, "NotFound")));
        assert!(!is_conflict(&api(429, "TooManyRequests")));
        assert!(!is_conflict(&transport()));
    }

    #[test]
    fn too_many_requests_is_a_429() {
        assert!(is_too_many_requests(&api(429, "TooManyRequests")));
        assert!(!is_too_many_requests(&api(409, "Conflict")));
        assert!(!is_too_many_requests(&transport()));
    }

    #[test]
    fn the_status_code_is_that_of_an_api_error_only() {
        assert_eq!(status_code(&api(503, "ServiceUnavailable")), Some(503));
        assert_eq!(status_code(&transport()), None);
    }

    #[test]
    fn ignore_not_found_keeps_values_drops_404s_and_passes_other_errors() {
        assert_eq!(ignore_not_found(Ok::<_, kube::Error>(7)).ok(), Some(Some(7)));
        assert_eq!(ignore_not_found::<u8>(Err(api(404, "NotFound"))).ok(), Some(None));
        let conflict = ignore_not_found::<u8>(Err(api(409, "Conflict")));
        assert!(matches!(&conflict, Err(e) if is_conflict(e)), "{conflict:?}");
        assert!(ignore_not_found::<u8>(Err(transport())).is_err());
    }
}
